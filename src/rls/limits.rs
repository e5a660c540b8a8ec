//! A domain's limits as the limiter takes them. A rate-limit request is decided as a synthetic
//! route named after its domain, with one limit per matched descriptor and one key per limit
//! (`RoutePolicy::with_given_keys`): the same store call, deny cache, `on_error` and metrics
//! as a route's. The policy of each set of limits a request brings is compiled once and kept
//! ([`Combo`]), up to [`MAX_COMBOS`] per domain.
//!
//! A limit's Redis keys are told apart by a tag made from its rule's place in the tree (its
//! descriptor keys), so a count survives a reload that keeps the rule where it is.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::tree::Level;
use crate::algorithm::AlgorithmId;
use crate::config::{
    Config, ExceedMode, KeyPart, KeySpec, LimitConfig, OnMissingKey, PathPattern, RlsDomain,
    RlsRule, RlsUnit, RouteConfig,
};
use crate::limit::RoutePolicy;
use crate::metrics::{Metrics, RouteMetrics};

/// Distinct sets of limits whose policies a domain keeps; beyond, a set is compiled for the
/// request alone.
pub const MAX_COMBOS: usize = 4096;

/// The `limit` label of Envoy's own limit for a descriptor that matches no rate limit.
pub const OVERRIDE_LABEL: &str = "override";

/// One limit a descriptor is counted by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Part {
    /// A rate limit of the domain's files.
    Rule(usize),
    /// Envoy's own limit from the descriptor, over the rule it matches (if any).
    Override {
        /// The rule the descriptor matches.
        rule: Option<usize>,
        /// `requests_per_unit`.
        limit: u32,
        /// `unit`.
        unit: RlsUnit,
        /// The descriptor's entry keys joined by `.` (what counts it when no rule matched).
        keys: String,
    },
}

/// The policies of one set of limits, in the order a request brought them.
pub struct Combo {
    /// Every limit: enforced, or in shadow mode when any of them is in shadow or quota mode
    /// (a refusal is then sorted out by [`Combo::enforced`] and the quota-mode limits).
    pub all: Arc<RoutePolicy>,
    /// Per limit, whether it is in shadow mode.
    pub shadow: Vec<bool>,
    /// Per limit, whether it is in quota mode.
    pub quota: Vec<bool>,
    /// With limits in shadow or quota mode beside others: the others alone, and their indexes
    /// in `all`.
    pub enforced: Option<(Arc<RoutePolicy>, Vec<usize>)>,
}

impl Combo {
    /// Whether limit `i` refuses a request by itself (neither shadow nor quota mode).
    pub fn enforces(&self, i: usize) -> bool {
        !self.shadow[i] && !self.quota[i]
    }
}

/// A domain, compiled.
pub struct Domain {
    /// Its name: the `route` label of its metrics, the first part of its Redis keys.
    pub name: String,
    /// Its descriptor tree.
    pub tree: Level,
    config: Arc<RlsDomain>,
    compiler: Compiler,
    combos: RwLock<HashMap<Vec<Part>, Arc<Combo>>>,
}

/// What compiling a policy needs.
#[derive(Clone)]
pub struct Compiler {
    /// The config in force.
    pub config: Arc<Config>,
    /// The metrics.
    pub metrics: Metrics,
    /// The store's `backend` label.
    pub backend: &'static str,
}

impl Domain {
    /// Compiles a domain of `compiler`'s config; its rate limits' series exist at 0 from
    /// here, as a route's do from its load.
    pub fn new(config: Arc<RlsDomain>, compiler: Compiler) -> Domain {
        let labels: Vec<String> = config.rules.iter().map(|r| r.label.clone()).collect();
        let c = &compiler;
        RouteMetrics::new(&c.metrics, &config.name, &labels, &[], c.backend);
        Domain {
            name: config.name.clone(),
            tree: Level::compile(&config.descriptors),
            config,
            compiler,
            combos: RwLock::new(HashMap::new()),
        }
    }

    /// Rule `i` of the domain.
    pub fn rule(&self, i: usize) -> &RlsRule {
        &self.config.rules[i]
    }

    /// Every rule.
    pub fn rules(&self) -> &[RlsRule] {
        &self.config.rules
    }

    /// The value of a limit (`requests_per_unit`).
    pub fn limit_of(&self, part: &Part) -> u64 {
        match part {
            Part::Rule(r) => self.rule(*r).limit,
            Part::Override { limit, .. } => u64::from(*limit),
        }
    }

    /// Whether `part` is counted by a sliding log, which writes an entry per unit charged.
    pub fn logs_each_unit(&self, part: &Part) -> bool {
        let algorithm = match part {
            Part::Rule(r) | Part::Override { rule: Some(r), .. } => self.rule(*r).algorithm,
            Part::Override { rule: None, .. } => crate::algorithm::AlgorithmId::SLIDING_LOG,
        };
        algorithm == crate::algorithm::AlgorithmId::SLIDING_LOG
    }

    /// Whether `part` is a rule in shadow mode (Envoy's own limits never are).
    pub fn is_shadow(&self, part: &Part) -> bool {
        matches!(part, Part::Rule(r) if self.rule(*r).shadow)
    }

    /// Whether `part` is a rule in quota mode (Envoy's own limits never are).
    pub fn is_quota(&self, part: &Part) -> bool {
        matches!(part, Part::Rule(r) if self.rule(*r).quota)
    }

    /// Limit `part` as a route's limit: its name (the `limit` label), value and window.
    pub fn limit_config(&self, part: &Part) -> LimitConfig {
        self.spec(part).config
    }

    /// Whether Envoy's own limit is one the algorithm counting it keeps exact.
    pub fn check_override(&self, part: &Part) -> Result<(), String> {
        let spec = self.spec(part);
        match spec.config.limit {
            0 => Ok(()),
            limit => spec.config.algorithm.get().check(
                limit,
                spec.config.window.as_micros() as u64,
                None,
            ),
        }
    }

    /// The policies of `parts`, compiled once.
    pub fn combo(&self, parts: &[Part]) -> Arc<Combo> {
        if let Some(c) = self.read_combos().get(parts) {
            return c.clone();
        }
        let combo = Arc::new(self.compile(parts));
        let mut combos = self.combos.write().unwrap_or_else(|e| e.into_inner());
        if combos.len() < MAX_COMBOS {
            combos.insert(parts.to_vec(), combo.clone());
        }
        combo
    }

    fn read_combos(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Vec<Part>, Arc<Combo>>> {
        self.combos.read().unwrap_or_else(|e| e.into_inner())
    }

    fn compile(&self, parts: &[Part]) -> Combo {
        let specs: Vec<Spec> = parts.iter().map(|p| self.spec(p)).collect();
        let shadow: Vec<bool> = specs.iter().map(|s| s.shadow).collect();
        let quota: Vec<bool> = specs.iter().map(|s| s.quota).collect();
        let soft: Vec<bool> = (0..specs.len()).map(|i| shadow[i] || quota[i]).collect();
        let any_soft = soft.iter().any(|&s| s);
        let all = self.policy(&specs, any_soft);
        let enforced = (any_soft && !soft.iter().all(|&s| s)).then(|| {
            let kept: Vec<usize> = (0..specs.len()).filter(|&i| !soft[i]).collect();
            let enforced: Vec<Spec> = kept.iter().map(|&i| specs[i].clone()).collect();
            (self.policy(&enforced, false), kept)
        });
        Combo {
            all,
            shadow,
            quota,
            enforced,
        }
    }

    /// The policy of a synthetic route named after the domain, with these limits.
    fn policy(&self, specs: &[Spec], shadow: bool) -> Arc<RoutePolicy> {
        let c = &self.compiler;
        let rls = c.config.rls.as_ref().expect("a domain comes from [rls]");
        let route = RouteConfig {
            name: self.name.clone(),
            path: PathPattern {
                path: "/".into(),
                prefix: true,
            },
            methods: None,
            upstream: None,
            key: KeySpec::of([KeyPart::Route]),
            on_missing_key: OnMissingKey::Reject,
            max_key_body_bytes: 0,
            on_exceed: if shadow {
                ExceedMode::Shadow
            } else {
                ExceedMode::Reject
            },
            on_error: Some(rls.on_error),
            headers: rls.headers,
            exempt: Vec::new(),
            access_log: false,
            access_log_sample: 0.0,
            limits: specs.iter().map(|s| s.config.clone()).collect(),
            max_cost_body_bytes: 0,
            answer_timeout: std::time::Duration::ZERO,
        };
        let names: Vec<String> = specs.iter().map(|s| s.config.name.clone()).collect();
        // (no rate limit reads its cost from an answer: the service sees none)
        let metrics = RouteMetrics::new(&c.metrics, &self.name, &names, &[], c.backend);
        let tags = specs.iter().map(|s| s.tag.clone()).collect();
        // A shadow-mode rate limit refuses no one: its breaches are not recorded as refusals.
        let recorded = specs.iter().map(|s| !s.shadow).collect();
        Arc::new(RoutePolicy::with_given_keys(
            Arc::new(route),
            tags,
            &c.config,
            Arc::new(metrics),
            recorded,
        ))
    }

    /// A limit as a route's: its label, numbers and algorithm, its tag, whether in shadow.
    fn spec(&self, part: &Part) -> Spec {
        match part {
            Part::Rule(r) => {
                let rule = self.rule(*r);
                Spec::new(
                    &rule.label,
                    rule.limit,
                    rule.window,
                    rule.algorithm,
                    &rule.path,
                )
                .modes(rule.shadow, rule.quota)
            }
            Part::Override {
                rule: Some(r),
                limit,
                unit,
                ..
            } => {
                let rule = self.rule(*r);
                Spec::new(
                    &rule.label,
                    u64::from(*limit),
                    unit.window(),
                    override_algorithm(rule.algorithm, *limit, unit.window()),
                    &rule.path,
                )
            }
            Part::Override {
                rule: None,
                limit,
                unit,
                keys,
            } => Spec::new(
                OVERRIDE_LABEL,
                u64::from(*limit),
                unit.window(),
                override_algorithm(AlgorithmId::SLIDING_LOG, *limit, unit.window()),
                &format!("{OVERRIDE_LABEL}|{keys}"),
            ),
        }
    }

    /// The policy of rule `label` alone, for `/admin/usage`.
    pub fn rule_policy(&self, label: &str) -> Option<Arc<RoutePolicy>> {
        let i = self.rules().iter().position(|r| r.label == label)?;
        Some(self.combo(&[Part::Rule(i)]).all.clone())
    }
}

/// One limit of a synthetic route.
#[derive(Clone)]
struct Spec {
    config: LimitConfig,
    tag: String,
    shadow: bool,
    quota: bool,
}

impl Spec {
    fn new(
        label: &str,
        limit: u64,
        window: std::time::Duration,
        algorithm: crate::algorithm::AlgorithmId,
        place: &str,
    ) -> Spec {
        let mut config = LimitConfig::new(label, limit, window);
        config.algorithm = algorithm;
        Spec {
            config,
            tag: tag_of(place),
            shadow: false,
            quota: false,
        }
    }

    fn modes(mut self, shadow: bool, quota: bool) -> Spec {
        self.shadow = shadow;
        self.quota = quota;
        self
    }
}

/// `~` and eight hex digits of a hash of a rule's place in its tree: what follows the domain
/// in the hash tag of its Redis keys.
pub fn tag_of(place: &str) -> String {
    let hashed = crate::store::layout::hashed(place);
    format!("~{}", &hashed[1..9])
}

/// The algorithm that counts Envoy's own limit of `limit` per `window`: the rule's (`sliding_log`
/// for a descriptor no rule matches), or, where that one cannot count it exactly (a
/// `sliding_log` limit above 10,000), `sliding_window_counter`, which counts any limit in
/// constant memory: an override comes with each request, and refusing it would refuse every
/// request it covers. A limit no algorithm counts exactly (`limit * window` of 2^53 µs or more)
/// keeps the rule's, which refuses it.
fn override_algorithm(preferred: AlgorithmId, limit: u32, window: Duration) -> AlgorithmId {
    let fits = |id: AlgorithmId| {
        let window_us = u64::try_from(window.as_micros()).unwrap_or(u64::MAX);
        id.get().check(u64::from(limit), window_us, None).is_ok()
    };
    match fits(preferred) || !fits(AlgorithmId::SLIDING_WINDOW_COUNTER) {
        true => preferred,
        false => AlgorithmId::SLIDING_WINDOW_COUNTER,
    }
}
