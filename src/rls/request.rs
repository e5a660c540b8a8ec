//! A `RateLimitRequest` read into what is decided: each descriptor matched in its domain's tree
//! (or given Envoy's own limit), with its cost; `unlimited` and `replaces` applied as
//! envoyproxy/ratelimit applies them; and the limits that are charged gathered into one set per
//! cost (a descriptor met twice counts once), so that each is one atomic decision.
//!
//! Nothing a request carries turns a limit off: only a request that names no domain or no
//! descriptor is an error. A value of any length is decided (keyed by its SHA-256 past 256
//! bytes); a cost above a limit makes that descriptor OVER_LIMIT (a shadow-mode limit's: over,
//! yet OK, as shadow mode always answers; a quota-mode limit's: over, refusing the request only
//! when no other quota-mode descriptor of it is charged, since the quota rule refuses only when
//! every quota-mode descriptor is over); a request with more than
//! [`MAX_DESCRIPTORS`] descriptors that match a limit, or whose costs to sliding logs add up to
//! more than [`MAX_LOGGED_UNITS`], is refused, decided by nothing (the bounds keep one store
//! call short): each matching descriptor OVER_LIMIT, the others OK; an Envoy
//! override with a unit that does not exist, or a value no algorithm counts exactly (one a
//! `sliding_log` cannot hold is counted by `sliding_window_counter`), is OVER_LIMIT for its
//! descriptor; `is_negative_hits` descriptors are only read.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use super::limits::{Domain, Part};
use crate::config::LimitConfig;

/// Most descriptors that match a limit decided in one request; a request with more is refused
/// (one store call stays short).
pub const MAX_DESCRIPTORS: usize = 64;

/// Most units one request charges to sliding logs, all its descriptors together: a sliding log
/// writes an entry per unit, and 64 descriptors of cost 10,000 would hold Redis for most of a
/// second. A request over it is refused, as one with too many descriptors is.
pub const MAX_LOGGED_UNITS: u64 = 20_000;

/// Why a request gets no answer but a gRPC error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RlsError {
    /// The request names no domain or no descriptor (`INVALID_ARGUMENT`).
    #[error("{0}")]
    Invalid(String),
}

/// What one descriptor gets.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// No rate limit applies (nothing matched, or its limit was replaced).
    Free,
    /// `unlimited: true`.
    Unlimited,
    /// Refused before any decision: its cost is above its limit, Envoy's override for it is
    /// one its algorithm cannot count (no limit to show), or the request has more descriptors
    /// that match a limit than are decided at once. With the limit its status shows.
    Refused(Option<Box<LimitConfig>>),
    /// A shadow-mode limit the descriptor's cost is above: over, yet never a refusal (OK,
    /// nothing remaining). With the limit its status shows.
    ShadowOver(Box<LimitConfig>),
    /// A quota-mode limit the descriptor's cost is above, beside quota-mode descriptors that
    /// are charged: OVER_LIMIT, yet the request is refused only if they are all over too. With
    /// the limit its status shows.
    QuotaOver(Box<LimitConfig>),
    /// Counted: limit `index` of charged group `group`, or of the read set (`group` `None`:
    /// `hits_addend` 0).
    Counted {
        /// The charged group, or `None` for the read set.
        group: Option<usize>,
        /// Its limit in the set.
        index: usize,
    },
}

/// One set of limits decided together: each limit with its key.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LimitSetPlan {
    /// The limits, in the order the descriptors brought them.
    pub parts: Vec<Part>,
    /// Each limit's key: the descriptor's values, escaped and joined with `|`.
    pub keys: Vec<String>,
}

impl LimitSetPlan {
    /// The index of `part` counting `key`, added when new.
    fn index_of(&mut self, part: Part, key: String) -> usize {
        match (0..self.parts.len()).find(|&i| self.parts[i] == part && self.keys[i] == key) {
            Some(i) => i,
            None => {
                self.parts.push(part);
                self.keys.push(key);
                self.parts.len() - 1
            }
        }
    }
}

/// The descriptors of one cost, charged together or not at all.
#[derive(Debug, Default, Clone)]
pub struct CostGroup {
    /// Their cost.
    pub cost: u64,
    /// Their limits.
    pub set: LimitSetPlan,
}

/// A request, read.
#[derive(Debug, Default)]
pub struct Plan {
    /// Per descriptor, in order.
    pub statuses: Vec<Status>,
    /// The limits charged, one group per cost, the largest cost first: a refusal by one group
    /// leaves the groups after it uncharged.
    pub charged: Vec<CostGroup>,
    /// The limits of descriptors with `hits_addend` 0: read, not charged.
    pub read: LimitSetPlan,
    /// The limits that refused a descriptor before any decision, each once, in order.
    pub refused: Vec<Part>,
    /// The shadow-mode limits a descriptor's cost was above, each once, in order.
    pub shadow_over: Vec<Part>,
    /// The quota-mode limits a descriptor's cost was above ([`Status::QuotaOver`]), each once,
    /// in order.
    pub quota_over: Vec<Part>,
}

impl Plan {
    /// Whether a descriptor was refused before any decision (so is the request).
    pub fn refused_unseen(&self) -> bool {
        self.statuses
            .iter()
            .any(|s| matches!(s, Status::Refused(_)))
    }
}

/// One matched descriptor before `replaces` is applied.
struct Found {
    part: Part,
    key: String,
    cost: u64,
}

/// Checks that the request names a domain and a descriptor: everything else is decided.
pub fn check(request: &RateLimitRequest) -> Result<(), RlsError> {
    if request.domain.is_empty() {
        return Err(RlsError::Invalid("domain: must not be empty".into()));
    }
    if request.descriptors.is_empty() {
        return Err(RlsError::Invalid(
            "descriptors: at least one descriptor is needed".into(),
        ));
    }
    Ok(())
}

/// Reads a checked request of a known domain.
pub fn plan(domain: &Domain, request: &RateLimitRequest) -> Plan {
    let n = request.descriptors.len();
    let request_cost = u64::from(request.hits_addend.max(1));
    let mut found: Vec<Option<Result<Found, ()>>> = Vec::with_capacity(n);
    let mut unlimited = vec![false; n];
    let mut replaced: Vec<&str> = Vec::new();
    for (i, d) in request.descriptors.iter().enumerate() {
        let cost = match d.is_negative_hits {
            // Giving units back is not done: such a descriptor is only read.
            true => 0,
            false => d.hits_addend.as_ref().map_or(request_cost, |h| h.value),
        };
        let matched = match matched_part(domain, d) {
            Ok(m) => m,
            Err(()) => {
                found.push(Some(Err(())));
                continue;
            }
        };
        // Envoy's own limits neither replace nor are replaced, and are never unlimited.
        if let Some((Part::Rule(r), _)) = &matched {
            let rule = domain.rule(*r);
            replaced.extend(rule.replaces.iter().map(String::as_str));
            unlimited[i] = rule.unlimited;
        }
        found.push(
            matched
                .filter(|_| !unlimited[i])
                .map(|(part, key)| Ok(Found { part, key, cost })),
        );
    }
    let is_replaced = |part: &Part| {
        let Part::Rule(r) = part else { return false };
        let name = domain.rule(*r).name.as_deref();
        name.is_some_and(|n| replaced.contains(&n))
    };
    let matched = (found.iter())
        .filter(|f| matches!(f, Some(Ok(f)) if !is_replaced(&f.part)))
        .count();
    // (a cost above its limit is refused on its own, charging nothing)
    let logged: u64 = (found.iter())
        .filter_map(|f| match f {
            Some(Ok(f)) if !is_replaced(&f.part) && domain.logs_each_unit(&f.part) => Some(f),
            _ => None,
        })
        .filter(|f| f.cost <= domain.limit_of(&f.part))
        .fold(0, |sum, f| sum.saturating_add(f.cost));
    if matched > MAX_DESCRIPTORS || logged > MAX_LOGGED_UNITS {
        return too_many(domain, found, &unlimited, is_replaced);
    }
    let above = |f: &Found| domain.limit_of(&f.part) > 0 && f.cost > domain.limit_of(&f.part);
    // Whether a quota-mode descriptor is charged: one whose cost is above its limit is then
    // one over among them, not a refusal on its own.
    let quota_charged = (found.iter()).any(|f| {
        matches!(f, Some(Ok(f)) if !is_replaced(&f.part) && domain.is_quota(&f.part)
            && f.cost > 0 && !above(f))
    });
    let mut plan = Plan {
        statuses: Vec::with_capacity(n),
        ..Plan::default()
    };
    let mut costs: Vec<u64> = found
        .iter()
        .filter_map(|f| match f {
            Some(Ok(f)) if f.cost > 0 => Some(f.cost),
            _ => None,
        })
        .collect();
    costs.sort_unstable_by(|a, b| b.cmp(a));
    costs.dedup();
    plan.charged = costs
        .iter()
        .map(|&cost| CostGroup {
            cost,
            set: LimitSetPlan::default(),
        })
        .collect();
    for (i, f) in found.into_iter().enumerate() {
        let f = match f {
            Some(Ok(f)) => Some(f),
            Some(Err(())) => {
                plan.statuses.push(Status::Refused(None));
                continue;
            }
            None => None,
        };
        let f = f.filter(|f| !is_replaced(&f.part));
        let status = match f {
            _ if unlimited[i] => Status::Unlimited,
            None => Status::Free,
            Some(f) if f.cost == 0 => Status::Counted {
                group: None,
                index: plan.read.index_of(f.part, f.key),
            },
            // A limit of 0 refuses every request whatever its cost.
            Some(f) if above(&f) => {
                let limit = || Box::new(domain.limit_config(&f.part));
                if domain.is_shadow(&f.part) {
                    let status = Status::ShadowOver(limit());
                    note_once(&mut plan.shadow_over, f.part);
                    status
                } else if quota_charged && domain.is_quota(&f.part) {
                    let status = Status::QuotaOver(limit());
                    note_once(&mut plan.quota_over, f.part);
                    status
                } else {
                    refuse(&mut plan.refused, domain, f.part)
                }
            }
            Some(f) => {
                let group = costs.iter().position(|&c| c == f.cost).expect("its cost");
                Status::Counted {
                    group: Some(group),
                    index: plan.charged[group].set.index_of(f.part, f.key),
                }
            }
        };
        plan.statuses.push(status);
    }
    plan.charged.retain(|g| !g.set.parts.is_empty());
    // Group indexes shift if a group lost every descriptor to a refusal: number them again.
    renumber(&mut plan, &costs);
    plan
}

/// The plan of a request with more descriptors that match a limit, or more units to log, than
/// one decision takes: each of them refused, showing its limit; the others as they are (OK).
fn too_many(
    domain: &Domain,
    found: Vec<Option<Result<Found, ()>>>,
    unlimited: &[bool],
    is_replaced: impl Fn(&Part) -> bool,
) -> Plan {
    let mut refused = Vec::new();
    let statuses = (found.into_iter().enumerate())
        .map(|(i, f)| match f {
            _ if unlimited[i] => Status::Unlimited,
            Some(Err(())) => Status::Refused(None),
            Some(Ok(f)) if !is_replaced(&f.part) => refuse(&mut refused, domain, f.part),
            _ => Status::Free,
        })
        .collect();
    Plan {
        statuses,
        refused,
        ..Plan::default()
    }
}

/// The status of a descriptor `part` refuses before any decision; the part is noted (once) in
/// `refused`, for the metrics.
fn refuse(refused: &mut Vec<Part>, domain: &Domain, part: Part) -> Status {
    let status = Status::Refused(Some(Box::new(domain.limit_config(&part))));
    note_once(refused, part);
    status
}

fn note_once(parts: &mut Vec<Part>, part: Part) {
    if !parts.contains(&part) {
        parts.push(part);
    }
}

/// Points each counted descriptor at its group's place once empty groups are gone.
fn renumber(plan: &mut Plan, costs: &[u64]) {
    let kept: Vec<u64> = plan.charged.iter().map(|g| g.cost).collect();
    for s in &mut plan.statuses {
        if let Status::Counted { group: Some(g), .. } = s {
            *g = kept
                .iter()
                .position(|&c| c == costs[*g])
                .expect("a counted descriptor's group is kept");
        }
    }
}

/// The limit descriptor `d` is counted by, and its key: Envoy's own limit when the descriptor
/// carries one (over the rule it matches, if any), else the rule it matches. An override that
/// cannot be counted (a unit that does not exist, a value the algorithm cannot hold) is `Err`:
/// its descriptor is refused, since dropping it would turn a limit off.
fn matched_part(domain: &Domain, d: &RateLimitDescriptor) -> Result<Option<(Part, String)>, ()> {
    let entries = || d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()));
    let matched = domain.tree.find(entries());
    let key = key_of(d, matched.as_ref().map(|m| m.shared.as_slice()));
    let Some(limit) = &d.limit else {
        return Ok(matched.map(|m| (Part::Rule(m.rule), key)));
    };
    let unit = super::unit::unit_of_code(limit.unit).ok_or(())?;
    let part = Part::Override {
        rule: matched.map(|m| m.rule),
        limit: limit.requests_per_unit,
        unit,
        keys: entries().map(|(k, _)| k).collect::<Vec<_>>().join("."),
    };
    domain.check_override(&part).map_err(|why| {
        tracing::warn!("an Envoy rate limit override is refused: {why}");
    })?;
    Ok(Some((part, key)))
}

/// A descriptor's key: its values, escaped and joined with `|` (a value whose node shares its
/// threshold counts as the node's pattern).
fn key_of(d: &RateLimitDescriptor, shared: Option<&[Option<String>]>) -> String {
    let mut key = String::new();
    for (j, e) in d.entries.iter().enumerate() {
        if j > 0 {
            key.push('|');
        }
        let pattern = shared.and_then(|s| s.get(j)).and_then(Option::as_deref);
        push_value(&mut key, pattern.unwrap_or(e.value.as_str()));
    }
    key
}

/// The key of a descriptor whose entries have `values`, in order (`/admin/usage?value=`).
pub fn key_of_values(values: &[&str]) -> String {
    let mut key = String::new();
    for (j, value) in values.iter().enumerate() {
        if j > 0 {
            key.push('|');
        }
        push_value(&mut key, value);
    }
    key
}

/// One entry's value in a key: escaped, or its SHA-256 when longer than
/// [`MAX_KEPT_VALUE_BYTES`].
fn push_value(key: &mut String, value: &str) {
    match value.len() > MAX_KEPT_VALUE_BYTES {
        true => key.push_str(&sha256_of(value)),
        false => crate::key::escape_into(key, value.as_bytes()),
    }
}

/// The longest descriptor value kept as it is in a key; a longer one is keyed by its SHA-256.
pub const MAX_KEPT_VALUE_BYTES: usize = 256;

/// `%sha256:` and the hex SHA-256 of `value`: no escaped value can equal it (an escaped value
/// has two hex digits after every `%`).
fn sha256_of(value: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(value.as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("%sha256:");
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}
