//! The seam every algorithm implements: [`Algorithm`] (its name, Lua piece, bounds and key
//! suffix) and [`KeyState`] (the same steps in Rust, for the memory store), with the values
//! they pass ([`LimitParams`], [`Settled`]).

/// The largest whole number a double holds exactly: the scripts' arithmetic stays below it.
pub const EXACT_IN_A_DOUBLE: u128 = 1 << 53;

/// What every algorithm provides.
pub trait Algorithm: Send + Sync + 'static {
    /// The name `algorithm = "..."` takes.
    fn name(&self) -> &'static str;
    /// Its Lua piece (`lua/<name>.lua`), wrapped in a scope of its own by the script builder.
    fn lua(&self) -> &'static str;
    /// What ends the Redis key of its state, after the key's base (`#log`, `#swc`, `#gcra`).
    fn key_suffix(&self) -> &'static str;
    /// Whether limits that count the same key differently (other `count_status`) need states
    /// of their own. A state shared by several limits (the log's one sorted set) records a
    /// request once for all of them, so a refund would take it from all of them.
    fn shares_charges(&self) -> bool;
    /// Checks a limit's numbers against what the algorithm can keep exact (`limit` per
    /// `window_us`, with `burst` when set); the message names the fix.
    fn check(&self, limit: u64, window_us: u64, burst: Option<u64>) -> Result<(), String>;
    /// Whether `burst` means anything to it.
    fn takes_burst(&self) -> bool {
        false
    }
    /// Whether it counts in a window (`window` required); `false`: it counts attempts in
    /// flight, whose state lasts a `lease` instead.
    fn has_window(&self) -> bool {
        true
    }
    /// Whether an attempt takes one unit of it whatever the request's cost (a slot).
    fn per_attempt(&self) -> bool {
        false
    }
    /// Whether its refusal may start a block (`on_exceed = "block"`): not for a refusal that
    /// only says attempts are still in flight.
    fn starts_blocks(&self) -> bool {
        true
    }
    /// The wait its refusals tell whatever the key's state (µs), when it has one: a slot in
    /// flight may come back any moment, so no count can say when. `None`: the wait is worked
    /// out from the count.
    fn fixed_wait_us(&self) -> Option<i64> {
        None
    }
    /// The name its limits take in `RateLimit-Policy` and `RateLimit`, when not their own.
    fn policy_name(&self) -> Option<&'static str> {
        None
    }
    /// An empty state of one key, for the memory store.
    fn new_state(&self) -> Box<dyn KeyState>;
}

/// One limit as a state sees it (the script's `name, limit, window, param`).
#[derive(Debug, Clone, Copy)]
pub struct LimitParams<'a> {
    /// The limit's name (a field of a hash).
    pub name: &'a str,
    /// Units per window for this key.
    pub limit: u64,
    /// The window in microseconds.
    pub window: u64,
    /// `burst` for gcra (0: the limit); unused by the others.
    pub param: u64,
}

/// The in-process twin of one Redis key of an algorithm: the same steps as its Lua file, on
/// the same numbers, so both stores answer alike to the microsecond. A call (one instant
/// `now`) opens the key once, makes views of it for its limits, and finishes it at the end.
pub trait KeyState: Send + 'static {
    /// A copy of the key's state (a dry run decides on copies and throws them away).
    fn duplicate(&self) -> Box<dyn KeyState>;
    /// Lua's `open`: the state at the start of a call at `now` (the log drops what left
    /// `window`, its longest; `bound` is the most entries that window can hold).
    fn open(&mut self, now: u64, window: u64, bound: u64);
    /// Lua's `view`: one limit's view, found again by its index for the rest of the call.
    fn view(&mut self, limit: &LimitParams<'_>, now: u64) -> usize;
    /// Whether `cost` more units fit under `limit`.
    fn fits(&self, view: usize, limit: u64, cost: u64) -> bool;
    /// The exact wait until `cost` units would fit (at least 1 µs).
    fn wait(&self, view: usize, limit: u64, cost: u64, now: u64) -> i64;
    /// Charges `cost` units for decision `d` whose first unit is `member`; a limit that counts
    /// outcomes gives `settle`, the longest its reservation stays in flight (0 otherwise).
    fn charge(&mut self, view: usize, cost: u64, member: &str, d: u64, settle: u64);
    /// Units used, and the time until the next one comes back.
    fn report(&self, view: usize, now: u64) -> (i64, i64);
    /// Takes back the charge of `member`, made at `at` for `cost` units (settled at `now`).
    fn refund(&mut self, limit: &LimitParams<'_>, member: &str, at: u64, cost: u64, now: u64);
    /// Lua's `in_flight`: 0 when the answered charges in the view leave no room for `cost`
    /// under `limit` (a refusal that stands on answers); else the time until the soonest
    /// reservation in it is settled, `settle` after its charge (at least 1 µs); -1 when the
    /// refusal stands on attempts kept without an answer (the log: entries
    /// [`KeyState::unanswered`] marked, or reservations older than `settle`; the counter and
    /// gcra: the answered charges with those it tallied leave no room).
    fn in_flight(
        &self,
        view: usize,
        name: &str,
        limit: u64,
        cost: u64,
        settle: u64,
        now: u64,
    ) -> i64;
    /// The charge of `member` was answered and stays counted: it is no longer in flight
    /// (`tag`: the value the attempt sent, `""` or `~<hex>`, kept where the algorithm can).
    fn confirm(
        &mut self,
        limit: &LimitParams<'_>,
        member: &str,
        at: u64,
        cost: u64,
        tag: &str,
        now: u64,
    );
    /// Lua's `unanswered`: the charge of `member`, made at `at` for `cost` units, stays
    /// counted though no answer came: the log marks its entries, the counter and gcra tally it
    /// apart from the answered ones, so `in_flight` can tell a refusal standing on it (a slot
    /// keeps nothing here).
    fn unanswered(
        &mut self,
        _limit: &LimitParams<'_>,
        _member: &str,
        _at: u64,
        _cost: u64,
        _now: u64,
    ) {
    }
    /// Lua's `settle`: the charge of `member` (made at `at` for `cost` units) becomes `amount`
    /// units (at most the limit), at `now`; answers how long (ms) the key must live at least
    /// from now when it charged more (`longest`: the state's longest window).
    fn settle(&mut self, limit: &LimitParams<'_>, charge: &Settled<'_>, now: u64) -> Option<u64>;
    /// Forgets one limit's answered charges (with a `tag`, only those of that value sent); the
    /// reservations still in flight stay. Whether nothing is left of the key's charges.
    fn clear(&mut self, name: &str, tag: &str, now: u64) -> bool;
    /// Lua's `finish`: writes the call's charges; the key's new expiry when it set one.
    fn finish(&mut self, now: u64) -> Option<u64>;
    /// Whether the key holds nothing (Redis would have deleted it).
    fn is_empty(&self) -> bool;
}

/// A charge a settlement gives its final amount (the script's `settle` arguments).
#[derive(Debug, Clone, Copy)]
pub struct Settled<'a> {
    /// The member of the charge's first unit.
    pub member: &'a str,
    /// When it was charged (µs).
    pub at: u64,
    /// Units it charged (the reservation).
    pub cost: u64,
    /// Units it comes to (at most the limit).
    pub amount: u64,
    /// The longest window of the limits sharing its state (µs).
    pub longest: u64,
}

/// Microseconds rounded up to whole milliseconds, as `PEXPIRE` takes them, back in µs.
pub(crate) fn expiry_after(now: u64, micros: u64) -> u64 {
    now + micros.div_ceil(1000) * 1000
}
