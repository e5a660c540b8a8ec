//! A `RateLimitRequest` read into what is decided: each descriptor checked against the bounds,
//! matched in its domain's tree (or given Envoy's own limit), with its cost; `unlimited` and
//! `replaces` applied as envoyproxy/ratelimit applies them; and the limits that are charged
//! gathered into one set (a descriptor met twice counts once), so that one atomic decision
//! charges them all or none.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use super::limits::{Domain, Part};
use super::{MAX_DESCRIPTORS, MAX_ENTRIES, MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// Why a request gets no answer but a gRPC error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RlsError {
    /// The request breaks the API or a bound (`INVALID_ARGUMENT`).
    #[error("{0}")]
    Invalid(String),
    /// A cost no limit could ever allow (`OUT_OF_RANGE`, the batch API's 400
    /// `cost_out_of_range`).
    #[error("cost_out_of_range: {0}")]
    CostOutOfRange(String),
}

/// What one descriptor gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// No rate limit applies (nothing matched, or its limit was replaced).
    Free,
    /// `unlimited: true`.
    Unlimited,
    /// Counted: limit `index` of the charged set, or of the read set (`hits_addend` 0).
    Counted {
        /// Whether it is only read.
        read: bool,
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

/// A request, read.
#[derive(Debug, Default)]
pub struct Plan {
    /// Per descriptor, in order.
    pub statuses: Vec<Status>,
    /// The limits charged, all or none.
    pub charged: LimitSetPlan,
    /// Their cost.
    pub cost: u64,
    /// The limits of descriptors with `hits_addend` 0: read, not charged.
    pub read: LimitSetPlan,
}

/// One matched descriptor before `replaces` is applied.
struct Found {
    part: Part,
    key: String,
    cost: u64,
}

/// Checks the request's shape against the API and the bounds.
pub fn check(request: &RateLimitRequest) -> Result<(), RlsError> {
    let invalid = |m: String| Err(RlsError::Invalid(m));
    if request.domain.is_empty() {
        return invalid("domain: must not be empty".into());
    }
    if request.descriptors.is_empty() {
        return invalid("descriptors: at least one descriptor is needed".into());
    }
    if request.descriptors.len() > MAX_DESCRIPTORS {
        return invalid(format!(
            "descriptors: {} descriptors, at most {MAX_DESCRIPTORS} per request",
            request.descriptors.len()
        ));
    }
    for (i, d) in request.descriptors.iter().enumerate() {
        if d.entries.is_empty() {
            return invalid(format!("descriptors[{i}]: no entries"));
        }
        if d.entries.len() > MAX_ENTRIES {
            return invalid(format!(
                "descriptors[{i}]: {} entries, at most {MAX_ENTRIES}",
                d.entries.len()
            ));
        }
        if d.is_negative_hits {
            return invalid(format!(
                "descriptors[{i}].is_negative_hits: giving units back is not supported"
            ));
        }
        for (j, e) in d.entries.iter().enumerate() {
            if e.key.is_empty() {
                return invalid(format!(
                    "descriptors[{i}].entries[{j}].key: must not be empty"
                ));
            }
            if e.key.len() > MAX_KEY_BYTES || e.value.len() > MAX_VALUE_BYTES {
                return invalid(format!(
                    "descriptors[{i}].entries[{j}]: a key is at most {MAX_KEY_BYTES} bytes and a value at most {MAX_VALUE_BYTES}"
                ));
            }
        }
    }
    Ok(())
}

/// Reads a checked request of a known domain.
pub fn plan(domain: &Domain, request: &RateLimitRequest) -> Result<Plan, RlsError> {
    let request_cost = u64::from(request.hits_addend.max(1));
    let mut found: Vec<Option<Found>> = Vec::with_capacity(request.descriptors.len());
    let mut unlimited = vec![false; request.descriptors.len()];
    let mut replaced: Vec<&str> = Vec::new();
    for (i, d) in request.descriptors.iter().enumerate() {
        let cost = d.hits_addend.as_ref().map_or(request_cost, |h| h.value);
        let matched = matched_part(domain, i, d)?;
        // Envoy's own limits neither replace nor are replaced, and are never unlimited.
        if let Some((Part::Rule(r), _)) = &matched {
            let rule = domain.rule(*r);
            replaced.extend(rule.replaces.iter().map(String::as_str));
            unlimited[i] = rule.unlimited;
        }
        found.push(
            matched
                .filter(|_| !unlimited[i])
                .map(|(part, key)| Found { part, key, cost }),
        );
    }
    let mut plan = Plan {
        statuses: Vec::with_capacity(found.len()),
        ..Plan::default()
    };
    for (i, f) in found.into_iter().enumerate() {
        let f = f.filter(|f| {
            let Part::Rule(r) = f.part else { return true };
            let name = domain.rule(r).name.as_deref();
            !name.is_some_and(|n| replaced.contains(&n))
        });
        let status = match f {
            _ if unlimited[i] => Status::Unlimited,
            None => Status::Free,
            Some(f) if f.cost == 0 => Status::Counted {
                read: true,
                index: plan.read.index_of(f.part, f.key),
            },
            Some(f) => {
                if plan.cost != 0 && plan.cost != f.cost {
                    return Err(RlsError::Invalid(format!(
                        "descriptors[{i}].hits_addend: {} differs from another descriptor's {}; one request is decided at one cost (send them in two requests)",
                        f.cost, plan.cost
                    )));
                }
                plan.cost = f.cost;
                Status::Counted {
                    read: false,
                    index: plan.charged.index_of(f.part, f.key),
                }
            }
        };
        plan.statuses.push(status);
    }
    check_cost(domain, &plan)?;
    Ok(plan)
}

/// The cost is at most the smallest limit it is charged against (a limit of 0 refuses every
/// request whatever its cost): a larger one could never be allowed.
fn check_cost(domain: &Domain, plan: &Plan) -> Result<(), RlsError> {
    let smallest = plan
        .charged
        .parts
        .iter()
        .map(|p| domain.limit_of(p))
        .filter(|&l| l > 0)
        .min();
    match smallest {
        Some(limit) if plan.cost > limit => Err(RlsError::CostOutOfRange(format!(
            "hits_addend {} is more than the smallest limit it is charged against ({limit}); a cost is 1 to {limit}",
            plan.cost
        ))),
        _ => Ok(()),
    }
}

/// The limit descriptor `d` (the `i`-th) is counted by, and its key: Envoy's own limit when
/// the descriptor carries one (over the rule it matches, if any), else the rule it matches.
fn matched_part(
    domain: &Domain,
    i: usize,
    d: &RateLimitDescriptor,
) -> Result<Option<(Part, String)>, RlsError> {
    let entries = || d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()));
    let matched = domain.tree.find(entries());
    let key = key_of(d, matched.as_ref().map(|m| m.shared.as_slice()));
    let Some(limit) = &d.limit else {
        return Ok(matched.map(|m| (Part::Rule(m.rule), key)));
    };
    let unit = super::answer::unit_of_code(limit.unit).ok_or_else(|| {
        RlsError::Invalid(format!(
            "descriptors[{i}].limit.unit: {} is not a unit (SECOND=1, MINUTE=2, HOUR=3, DAY=4, MONTH=5, YEAR=6, WEEK=7)",
            limit.unit
        ))
    })?;
    let part = Part::Override {
        rule: matched.map(|m| m.rule),
        limit: limit.requests_per_unit,
        unit,
        keys: entries().map(|(k, _)| k).collect::<Vec<_>>().join("."),
    };
    domain
        .check_override(&part)
        .map_err(|why| RlsError::Invalid(format!("descriptors[{i}].limit: {why}")))?;
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
        key.push_str(&crate::key::escape(
            pattern.unwrap_or(e.value.as_str()).as_bytes(),
        ));
    }
    key
}
