//! `[[routes]]` and `[[routes.limits]]`, validated: the path a route takes (with its case rule),
//! its methods, key, exceed mode and limits, and each limit's algorithm, key and outcome rules.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use http::Method;
use ipnet::IpNet;

use super::key_spec::KeySpec;
use super::settings::{OnError, OnMissingKey, PathCase};
use crate::algorithm::AlgorithmId;
use crate::cost::{CostFrom, Reserve};

/// A route's path: exact, or a prefix when written with a trailing `/*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    /// The path without the `/*`.
    pub path: String,
    /// Whether everything below `path` matches too.
    pub prefix: bool,
}

impl PathPattern {
    /// Whether the normalised `path` is matched: `/api/otp/*` matches `/api/otp` and
    /// `/api/otp/x`, not `/api/otpx`; an exact `/login` matches `/login` and `/login/`, and so
    /// does an exact `/login/`, because most upstream frameworks serve both alike and the limit
    /// must not be dodged by a slash. With [`PathCase::Insensitive`] ASCII case is ignored.
    pub fn matches(&self, path: &str, case: PathCase) -> bool {
        let starts = |p: &str, with: &str| {
            p.len() >= with.len()
                && match case {
                    PathCase::Sensitive => p.as_bytes()[..with.len()] == *with.as_bytes(),
                    PathCase::Insensitive => {
                        p.as_bytes()[..with.len()].eq_ignore_ascii_case(with.as_bytes())
                    }
                }
        };
        if self.prefix {
            if !starts(path, &self.path) {
                return false;
            }
            let rest = &path[self.path.len()..];
            return rest.is_empty() || rest.starts_with('/') || self.path.ends_with('/');
        }
        // exact: the path with or without one trailing slash, however the route writes it
        let bare = match self.path.strip_suffix('/') {
            Some(bare) if !bare.is_empty() => bare,
            _ => &self.path,
        };
        if !starts(path, bare) {
            return false;
        }
        let rest = &path[bare.len()..];
        rest.is_empty() || rest == "/"
    }

    /// Whether every path this pattern's route could take is also taken by `other`.
    pub fn within(&self, other: &PathPattern, case: PathCase) -> bool {
        match (self.prefix, other.prefix) {
            (_, true) => other.matches(&self.path, case),
            (false, false) => other.matches(&self.path, case),
            (true, false) => false,
        }
    }
}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix {
            write!(f, "{}/*", self.path.trim_end_matches('/'))
        } else {
            f.write_str(&self.path)
        }
    }
}

/// How a blocking route blocks (`on_exceed = "block"`).
#[derive(Debug, Clone, PartialEq)]
pub struct BlockPolicy {
    /// The first block.
    pub block_for: Duration,
    /// Each next block is this many times longer (1: fixed blocks).
    pub growth: f64,
    /// The longest block.
    pub max: Duration,
    /// Quiet time after a block's end after which the next block is the first again.
    pub forget: Duration,
}

/// What happens to a request over the limit.
#[derive(Debug, Clone, PartialEq)]
pub enum ExceedMode {
    /// 429 at once.
    Reject,
    /// Wait for room up to `max_delay`, with at most `max_waiting` requests waiting on the route.
    Delay {
        /// Longest wait before a 429.
        max_delay: Duration,
        /// Requests waiting at once on this route; beyond, 429.
        max_waiting: usize,
    },
    /// Reject the key for a while after it exceeds, longer each time.
    Block(BlockPolicy),
    /// Count but never reject.
    Shadow,
}

impl ExceedMode {
    /// The name used in the config file.
    pub fn name(&self) -> &'static str {
        match self {
            ExceedMode::Reject => "reject",
            ExceedMode::Delay { .. } => "delay",
            ExceedMode::Block(_) => "block",
            ExceedMode::Shadow => "shadow",
        }
    }
}

/// Response statuses a limit counts or resets on: codes (`401`) and classes (`"5xx"`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct StatusSet {
    /// Single codes, sorted.
    pub codes: Vec<u16>,
    /// Classes by their first digit (`5` for `"5xx"`), sorted.
    pub classes: Vec<u8>,
}

impl StatusSet {
    /// Whether `status` is in the set.
    pub fn contains(&self, status: u16) -> bool {
        self.codes.binary_search(&status).is_ok()
            || self.classes.binary_search(&((status / 100) as u8)).is_ok()
    }
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self
            .codes
            .iter()
            .map(u16::to_string)
            .chain(self.classes.iter().map(|c| format!("\"{c}xx\"")))
            .collect();
        write!(f, "[{}]", items.join(", "))
    }
}

/// `[[routes.limits]]`
#[derive(Debug, Clone, PartialEq)]
pub struct LimitConfig {
    /// The name shown in headers, bodies and metrics.
    pub name: String,
    /// Units allowed per window (at least 1), for keys in no segment or plan below; attempts
    /// in flight for a concurrency limit.
    pub limit: u64,
    /// The window length; a concurrency limit's `lease` (how long a slot lasts at most).
    pub window: Duration,
    /// How the limit counts (`sliding_log` when the file does not say).
    pub algorithm: AlgorithmId,
    /// `burst` (gcra): units that may come at once; the limit when unset.
    pub burst: Option<u64>,
    /// The limit's own key; `None` counts the route's.
    pub key: Option<KeySpec>,
    /// What a missing part of this limit's key does; `None`: the route's `on_missing_key`.
    pub on_missing_key: Option<OnMissingKey>,
    /// Only attempts answered with one of these count (a reservation until the answer).
    pub count_status: Option<StatusSet>,
    /// An answer with one of these clears the limit's count and its key's block level.
    pub reset_status: Option<StatusSet>,
    /// Where the answer states what the attempt cost; `None`: it costs the request's units.
    pub cost_from: Option<CostFrom>,
    /// What an attempt of a `cost_from` limit holds until its answer states the cost.
    pub cost: Reserve,
    /// `[routes.limits.segments]`: the value for keys in a segment.
    pub segments: BTreeMap<String, u64>,
    /// `[routes.limits.plans]`: the value for keys on a plan.
    pub plans: BTreeMap<String, u64>,
}

impl LimitConfig {
    /// The most units one decision can ever take of this limit when its value in force is
    /// `limit`: [`LimitConfig::most_of`] with its `burst`.
    pub fn most_at_once(&self, limit: u64) -> u64 {
        LimitConfig::most_of(limit, self.burst)
    }

    /// The most units one decision can take of a limit of `limit` with `burst`: the limit, or
    /// the burst when smaller (gcra).
    pub fn most_of(limit: u64, burst: Option<u64>) -> u64 {
        limit.min(burst.unwrap_or(u64::MAX))
    }

    /// A `sliding_log` limit with one value for every key, counting the route's key.
    pub fn new(name: &str, limit: u64, window: Duration) -> LimitConfig {
        LimitConfig {
            name: name.to_string(),
            limit,
            window,
            algorithm: AlgorithmId::SLIDING_LOG,
            burst: None,
            key: None,
            on_missing_key: None,
            count_status: None,
            reset_status: None,
            cost_from: None,
            cost: Reserve::Units(1),
            segments: BTreeMap::new(),
            plans: BTreeMap::new(),
        }
    }

    /// Whether its count depends on the response (a reservation settled at the answer).
    pub fn counts_outcomes(&self) -> bool {
        self.count_status.is_some() || self.reset_status.is_some()
    }

    /// Whether it needs the response: its count depends on the status, its slot is held until
    /// the answer has been sent, or the answer states its cost.
    pub fn needs_response(&self) -> bool {
        self.counts_outcomes() || self.cost_from.is_some() || !self.algorithm.get().has_window()
    }
}

/// `[[routes]]`
#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    /// Unique name: metrics label, Redis key segment.
    pub name: String,
    /// Path to match.
    pub path: PathPattern,
    /// Methods to match; `None` matches all. A route that lists `GET` also takes `HEAD`.
    pub methods: Option<Vec<Method>>,
    /// The upstream's name (`None` for a route of an embedded layer).
    pub upstream: Option<String>,
    /// The key its limits count unless they name their own.
    pub key: KeySpec,
    /// What a request missing a key part gets.
    pub on_missing_key: OnMissingKey,
    /// Bytes of body read for `json:`/`form:` key parts at most.
    pub max_key_body_bytes: usize,
    /// What a request over the limit gets.
    pub on_exceed: ExceedMode,
    /// What a store failure does on this route, when the route says (else `store.on_error`).
    pub on_error: Option<OnError>,
    /// Whether responses carry rate-limit headers (`Retry-After` stays on 429s).
    pub headers: bool,
    /// Clients passed through uncounted (decision `exempt`).
    pub exempt: Vec<IpNet>,
    /// Whether requests of this route are written to the access log.
    pub access_log: bool,
    /// The share of allowed requests written to the access log (others always are).
    pub access_log_sample: f64,
    /// The limits, all decided in one atomic call (whatever their algorithms).
    pub limits: Vec<LimitConfig>,
    /// Body bytes a `json:` cost reader reads at most (an `sse:` one, per event).
    pub max_cost_body_bytes: usize,
    /// How long an answer whose client left is still read for its cost: the upstream's
    /// `timeout`.
    pub answer_timeout: Duration,
}

impl RouteConfig {
    /// Whether this route takes a request with this method and path; methods compare ignoring
    /// case, and `HEAD` is taken by a route that lists `GET`.
    pub fn matches(&self, method: &Method, path: &str, case: PathCase) -> bool {
        self.takes_method(method) && self.path.matches(path, case)
    }

    /// Whether the route takes `method`.
    pub fn takes_method(&self, method: &Method) -> bool {
        let Some(methods) = &self.methods else {
            return true;
        };
        let name = method.as_str();
        methods.iter().any(|m| {
            m.as_str().eq_ignore_ascii_case(name)
                || (*m == Method::GET && name.eq_ignore_ascii_case("HEAD"))
        })
    }

    /// Whether any key of the route (its own or a limit's), or a limit's reservation
    /// (`cost = "json:..."`), reads the request body.
    pub fn reads_body(&self) -> bool {
        !self.limits.is_empty()
            && (self.key.reads_body()
                || self.limits.iter().any(|l| {
                    l.key.as_ref().is_some_and(KeySpec::reads_body)
                        || (l.cost_from.is_some() && l.cost.reads_body())
                }))
    }

    /// Why the route's limits need to see the response, and what becomes of them where it is
    /// not seen (`None`: nothing): what a decider that never sees it (forward auth, Envoy's
    /// ext_authz) cannot do for this route, as `check` says. The one rule for every such
    /// warning.
    pub fn needs_response(&self) -> Option<(&'static str, &'static str)> {
        let any = |f: fn(&LimitConfig) -> bool| self.limits.iter().any(f);
        if any(LimitConfig::counts_outcomes) {
            Some((
                "counts outcomes (count_status/reset_status)",
                "every admitted attempt stays counted and reset_status never applies",
            ))
        } else if any(|l| !l.algorithm.get().has_window()) {
            Some((
                "limits attempts in flight (algorithm = \"concurrency\")",
                "an attempt's slot is freed once the proxy's question is answered, before the attempt itself ends, so it bounds only the questions in flight",
            ))
        } else if any(|l| l.cost_from.is_some()) {
            Some((
                "charges what the answer states (cost_from)",
                "every attempt is charged its reservation",
            ))
        } else {
            None
        }
    }

    /// Whether an allowed request holds a reservation its answer settles.
    pub fn settles_answers(&self) -> bool {
        self.limits.iter().any(LimitConfig::needs_response)
    }

    /// Whether any limit counts outcomes (its requests hold a reservation until answered).
    pub fn counts_outcomes(&self) -> bool {
        self.limits.iter().any(LimitConfig::counts_outcomes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(path: &str, prefix: bool) -> PathPattern {
        PathPattern {
            path: path.into(),
            prefix,
        }
    }

    #[test]
    fn prefix_patterns_match_the_base_and_below_only() {
        let p = pattern("/api/otp", true);
        let s = PathCase::Sensitive;
        assert!(p.matches("/api/otp", s));
        assert!(p.matches("/api/otp/", s));
        assert!(p.matches("/api/otp/send", s));
        assert!(!p.matches("/api/otpx", s));
        assert!(!p.matches("/api", s));
        assert!(pattern("/", true).matches("/anything", s));
        let exact = pattern("/login", false);
        assert!(exact.matches("/login", s));
        assert!(exact.matches("/login/", s));
        assert!(!exact.matches("/login/x", s));
        assert!(!exact.matches("/loginx", s));
    }

    #[test]
    fn case_is_ignored_unless_sensitive() {
        let p = pattern("/api/otp", true);
        assert!(p.matches("/API/Otp/send", PathCase::Insensitive));
        assert!(!p.matches("/API/Otp/send", PathCase::Sensitive));
        assert!(pattern("/a", false).within(&pattern("/A", false), PathCase::Insensitive));
        assert!(pattern("/api/x", false).within(&pattern("/api", true), PathCase::Sensitive));
        assert!(!pattern("/api", true).within(&pattern("/api/x", false), PathCase::Sensitive));
    }

    #[test]
    fn statuses_match_codes_and_classes() {
        let set = StatusSet {
            codes: vec![401, 403],
            classes: vec![5],
        };
        assert!(set.contains(401) && set.contains(502) && set.contains(599));
        assert!(!set.contains(200) && !set.contains(404));
    }
}
