//! The synthetic trace: Pareto-distributed per-key rates as Poisson streams, plus bursts that
//! straddle window edges, on a grid of `tick_ms`.

use crate::settings::Settings;

/// splitmix64: a small deterministic generator, so a seed names a trace.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    fn pareto(&mut self, scale: f64, shape: f64) -> f64 {
        scale / (1.0 - self.unit()).powf(1.0 / shape)
    }
}

/// One request of the trace: a key and an instant (µs since the epoch).
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub at: u64,
    pub key: u32,
}

/// Per-key request rates, Pareto-distributed (shape 1.2): most keys stay well under the limit,
/// a tail goes far over it (capped at 25 times the limit's rate). The scale puts the median key
/// at `median_share` of the limit's rate.
fn key_rates(s: &Settings, rng: &mut Rng) -> Vec<f64> {
    let limit_rate = s.limit as f64 / s.window_secs as f64;
    let shape = 1.2;
    let scale = s.median_share * limit_rate / 2f64.powf(1.0 / shape);
    (0..s.keys)
        .map(|_| rng.pareto(scale, shape).min(25.0 * limit_rate))
        .collect()
}

/// A Poisson stream at `rate` requests per second over the whole trace.
fn steady(s: &Settings, rng: &mut Rng, key: u32, rate: f64, out: &mut Vec<Event>) {
    let mut at = s.start_us() as f64;
    loop {
        at += rng.exponential(1e6 / rate);
        if at >= s.end_us() as f64 {
            return;
        }
        out.push(Event { at: at as u64, key });
    }
}

/// Bursts at window edges: at each inner edge, with `burst_chance`, between half and twice the
/// limit in requests, each within about half a second before or after the edge (the pattern
/// that fools fixed windows, and that the counter's weighting is least sure about).
fn edge_bursts(s: &Settings, rng: &mut Rng, key: u32, out: &mut Vec<Event>) {
    for edge in 1..s.windows {
        if rng.unit() >= s.burst_chance {
            continue;
        }
        let edge_us = (s.start_us() + edge * s.window_us()) as f64;
        let size = (s.limit as f64 * (0.5 + 1.5 * rng.unit())).round() as u64;
        for _ in 0..size {
            let offset = rng.exponential(500_000.0);
            let at = if rng.unit() < 0.5 {
                edge_us - offset - 1.0
            } else {
                edge_us + offset
            };
            out.push(Event { at: at as u64, key });
        }
    }
}

/// The whole trace, on a grid of `tick_ms` (requests of one tick share an instant, so one
/// script call decides them), in time order.
pub fn trace(s: &Settings) -> Vec<Event> {
    let mut rng = Rng(s.seed);
    let rates = key_rates(s, &mut rng);
    let mut events = Vec::new();
    for (key, &rate) in rates.iter().enumerate() {
        steady(s, &mut rng, key as u32, rate, &mut events);
        edge_bursts(s, &mut rng, key as u32, &mut events);
    }
    let tick = s.tick_ms * 1000;
    for e in &mut events {
        e.at = e.at.clamp(s.start_us(), s.end_us() - 1) / tick * tick;
    }
    events.sort_by_key(|e| e.at);
    events
}
