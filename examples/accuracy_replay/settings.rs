//! The trace's knobs, one flag each, and the bounds the algorithms put on them.

/// The most a `sliding_log` limit may hold (README, "Which algorithm").
const MAX_LOG_LIMIT: u64 = 10_000;
/// The counter's `limit * window` in microseconds stays below this (README, "Which algorithm").
const EXACT_IN_A_DOUBLE: u128 = 1 << 53;

/// What the trace looks like; every knob is a flag.
#[derive(Debug, Clone)]
pub struct Settings {
    pub port: u16,
    pub keys: usize,
    pub windows: u64,
    pub limit: u64,
    pub window_secs: u64,
    pub tick_ms: u64,
    /// The median key's rate as a share of the limit's rate.
    pub median_share: f64,
    /// Chance that a key bursts at a given window edge.
    pub burst_chance: f64,
    pub seed: u64,
}

impl Settings {
    pub fn from_args() -> Settings {
        let mut s = Settings {
            port: 0,
            keys: 4000,
            windows: 8,
            limit: 50,
            window_secs: 60,
            tick_ms: 10,
            median_share: 0.2,
            burst_chance: 0.15,
            seed: 7,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let value = args
                .next()
                .unwrap_or_else(|| panic!("{flag} needs a value"));
            match flag.as_str() {
                "--port" => s.port = number(&flag, &value),
                "--keys" => s.keys = number(&flag, &value),
                "--windows" => s.windows = number(&flag, &value),
                "--limit" => s.limit = number(&flag, &value),
                "--window-secs" => s.window_secs = number(&flag, &value),
                "--tick-ms" => s.tick_ms = number(&flag, &value),
                "--median-share" => s.median_share = number(&flag, &value),
                "--burst-chance" => s.burst_chance = number(&flag, &value),
                "--seed" => s.seed = number(&flag, &value),
                other => panic!("unknown flag {other}"),
            }
        }
        s.check();
        s
    }

    /// The same bounds the config puts on a limit, so the replay never runs what a gateway
    /// would refuse.
    fn check(&self) {
        assert!(self.port != 0, "--port of the Redis to use is required");
        assert!(
            self.keys >= 1 && self.windows >= 1 && self.tick_ms >= 1,
            "--keys, --windows and --tick-ms must be at least 1"
        );
        assert!(
            (1..=MAX_LOG_LIMIT).contains(&self.limit),
            "--limit must be 1..={MAX_LOG_LIMIT} (a sliding_log limit holds at most {MAX_LOG_LIMIT})"
        );
        assert!(
            (1..=366 * 86_400).contains(&self.window_secs),
            "--window-secs must be 1..=31622400 (windows are 1 ms .. 366 d)"
        );
        assert!(
            (self.limit as u128) * (self.window_us() as u128) < EXACT_IN_A_DOUBLE,
            "--limit * --window-secs in microseconds must stay below 2^53 (the counter's bound)"
        );
        assert!(
            self.median_share > 0.0 && (0.0..=1.0).contains(&self.burst_chance),
            "--median-share must be above 0 and --burst-chance within 0..=1"
        );
    }

    pub fn window_us(&self) -> u64 {
        self.window_secs * 1_000_000
    }

    /// The trace starts at a window edge, so its windows are the counter's fixed windows.
    pub fn start_us(&self) -> u64 {
        1_700_000_000_000_000u64.div_ceil(self.window_us()) * self.window_us()
    }

    pub fn end_us(&self) -> u64 {
        self.start_us() + self.windows * self.window_us()
    }
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| panic!("{flag}: not a number: {value}"))
}
