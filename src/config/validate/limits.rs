//! `[[routes.limits]]`: name, limit, window, algorithm (and its bounds), burst, the limit's own
//! key, the statuses it counts or resets on, and its per-segment and per-plan values.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use toml::Spanned;

use super::routes::{KnownTiers, RouteContext};
use super::{Result, Validator};
use crate::algorithm::AlgorithmId;
use crate::config::raw::{RawLimit, RawStatus};
use crate::config::{ExceedMode, KeySpec, LimitConfig, StatusSet};

/// Units one charge of a `sliding_log` limit may write before `check` warns that costs are
/// better kept by an algorithm with one number per key (a thousand entries take about a
/// millisecond of one script call).
const LOG_UNITS_AT_ONCE: u64 = 1_000;

impl Validator<'_> {
    pub(super) fn limits(
        &mut self,
        raw: &[Spanned<RawLimit>],
        at: &str,
        context: &RouteContext<'_>,
        mode: &ExceedMode,
        route_key: &KeySpec,
        answer_wait: Duration,
    ) -> Result<Vec<LimitConfig>> {
        let mut names = HashSet::new();
        let mut limits = Vec::with_capacity(raw.len());
        for (j, spanned) in raw.iter().enumerate() {
            let l = spanned.get_ref();
            let key = format!("{at}.limits[{j}]");
            let limit = self.limit(spanned, &key, context, mode, route_key, answer_wait)?;
            if !names.insert(limit.name.clone()) {
                return self.error(
                    l.name.span(),
                    format!(
                        "{key}.name: duplicate limit name `{}` in this route",
                        limit.name
                    ),
                );
            }
            limits.push(limit);
        }
        Ok(limits)
    }

    fn limit(
        &mut self,
        spanned: &Spanned<RawLimit>,
        key: &str,
        context: &RouteContext<'_>,
        mode: &ExceedMode,
        route_key: &KeySpec,
        answer_wait: Duration,
    ) -> Result<LimitConfig> {
        let (l, span) = (spanned.get_ref(), spanned.span());
        let name = self.name(&l.name, &format!("{key}.name"))?;
        let limit = *l.limit.get_ref();
        if limit < 1 {
            return self.error(
                l.limit.span(),
                format!("{key}.limit: must be at least 1, got {limit}"),
            );
        }
        let algorithm = self.choice(
            l.algorithm.as_ref(),
            &format!("{key}.algorithm"),
            "algorithm",
            &AlgorithmId::all()
                .map(|a| (a.name(), a))
                .collect::<Vec<_>>(),
            AlgorithmId::SLIDING_LOG,
        )?;
        let window = self.window_or_lease(l, key, span, algorithm, answer_wait)?;
        self.algorithm_rules(l, key, algorithm, mode)?;
        let burst = self.burst(l, key, algorithm)?;
        let window_us = window.as_micros() as u64;
        let bounds = |value: u64| algorithm.get().check(value, window_us, burst);
        if let Err(why) = bounds(limit as u64) {
            // the larger of the two is the value at fault
            let (span, setting) = match (&l.burst, burst) {
                (Some(raw), Some(b)) if b > limit as u64 => (raw.span(), "burst"),
                _ => (l.limit.span(), "limit"),
            };
            return self.error(span, format!("{key}.{setting}: {why}"));
        }
        let segments = self.tier_values(&l.segments, &format!("{key}.segments"), |s| {
            known_segment(&context.tiers, s)
        })?;
        let plans =
            self.tier_values(&l.plans, &format!("{key}.plans"), |_| {
                context.tiers.plans.as_ref().map(|_| ()).ok_or_else(|| {
                    "plan values need a [plans] section with a members_file".to_string()
                })
            })?;
        for (values, raw, what) in [
            (&segments, &l.segments, "segments"),
            (&plans, &l.plans, "plans"),
        ] {
            for (tier, &value) in values {
                if let Err(why) = bounds(value) {
                    return self.error(raw[tier].span(), format!("{key}.{what}.{tier}: {why}"));
                }
            }
        }
        if let Some(known) = &context.tiers.plans {
            for (plan, value) in &l.plans {
                if !known.contains(plan.as_str()) {
                    self.warn(
                        value.span(),
                        format!("{key}.plans.{plan}: no key in the plans file is on plan `{plan}` (yet)"),
                    );
                }
            }
        }
        let own_key = match &l.key {
            Some(k) => Some(self.key_spec(k, &format!("{key}.key"), context)?),
            None => None,
        };
        let on_missing_key = self.on_missing_key(l.on_missing_key.as_ref(), key)?;
        let count_status =
            self.statuses(l.count_status.as_ref(), &format!("{key}.count_status"))?;
        let reset_status =
            self.statuses(l.reset_status.as_ref(), &format!("{key}.reset_status"))?;
        let merging = own_key.as_ref().unwrap_or(route_key).merging_part();
        if let (Some(s), Some(part), false) = (
            &l.reset_status,
            merging,
            algorithm == AlgorithmId::SLIDING_LOG,
        ) {
            return self.error(
                s.span(),
                format!("{key}.reset_status: `{}` counts several values as one key (`{}`), and {} keeps no entry per attempt, so a reset could not tell which value each attempt sent: one account's success would forgive the others' failures; use algorithm = \"sliding_log\", or a key that keeps values apart", part.part, part_options(part), algorithm.name()),
            );
        }
        if let (Some(s), ExceedMode::Delay { .. }) = (&l.count_status, mode) {
            return self.error(
                s.span(),
                format!("{key}.count_status: cannot be used on a \"delay\" route (a delayed request would hold its reservation while it waits; use \"reject\" or \"block\")"),
            );
        }
        let most = LimitConfig::most_of(limit as u64, burst);
        let (cost_from, cost) = self.cost_settings(l, key, most)?;
        if let (Some(from), true) = (&l.cost_from, algorithm == AlgorithmId::SLIDING_LOG) {
            if limit as u64 > LOG_UNITS_AT_ONCE {
                self.warn(
                    from.span(),
                    format!("{key}.cost_from: a sliding_log limit keeps one entry per unit, so one answer's cost (up to {limit}) writes that many entries in one script call (about a millisecond per thousand, and a hundred bytes each, in Redis); for costs, algorithm = \"sliding_window_counter\" or \"gcra\" keep one number per key"),
                );
            }
        }
        Ok(LimitConfig {
            name,
            limit: limit as u64,
            window,
            algorithm,
            burst,
            key: own_key,
            on_missing_key,
            count_status,
            reset_status,
            cost_from,
            cost,
            segments,
            plans,
        })
    }

    /// `burst`: at least 1, for an algorithm that takes one (else accepted with a warning).
    fn burst(&mut self, l: &RawLimit, key: &str, algorithm: AlgorithmId) -> Result<Option<u64>> {
        let Some(b) = &l.burst else { return Ok(None) };
        if *b.get_ref() < 1 {
            return self.error(
                b.span(),
                format!("{key}.burst: must be at least 1, got {}", b.get_ref()),
            );
        }
        if !algorithm.get().takes_burst() {
            self.warn(
                b.span(),
                format!("{key}.burst is ignored: only algorithm = \"gcra\" takes a burst"),
            );
            return Ok(None);
        }
        Ok(Some(*b.get_ref() as u64))
    }

    /// `count_status` / `reset_status`: codes 100-599 and classes `"1xx"`..`"5xx"`.
    fn statuses(
        &self,
        raw: Option<&Spanned<Vec<Spanned<RawStatus>>>>,
        key: &str,
    ) -> Result<Option<StatusSet>> {
        let Some(raw) = raw else { return Ok(None) };
        if raw.get_ref().is_empty() {
            return self.error(
                raw.span(),
                format!("{key}: needs at least one status (like [401, 403] or [\"5xx\"])"),
            );
        }
        let mut set = StatusSet::default();
        for s in raw.get_ref() {
            match s.get_ref() {
                RawStatus::Code(c) if (100..=599).contains(c) => set.codes.push(*c as u16),
                RawStatus::Class(c) if is_class(c) => set.classes.push(c.as_bytes()[0] - b'0'),
                RawStatus::Code(c) => {
                    return self.error(
                        s.span(),
                        format!("{key}: `{c}` is not an HTTP status (100-599)"),
                    )
                }
                RawStatus::Class(c) => {
                    return self.error(
                        s.span(),
                        format!("{key}: `{c}` is not a status or a class like \"4xx\""),
                    )
                }
            }
        }
        set.codes.sort_unstable();
        set.codes.dedup();
        set.classes.sort_unstable();
        set.classes.dedup();
        Ok(Some(set))
    }

    /// Per-segment or per-plan values of a limit: whole numbers of at least 0 (0 lets nothing
    /// through), each naming something `known` accepts.
    fn tier_values(
        &self,
        raw: &BTreeMap<String, Spanned<i64>>,
        key: &str,
        known: impl Fn(&str) -> std::result::Result<(), String>,
    ) -> Result<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        for (name, value) in raw {
            if let Err(why) = known(name) {
                return self.error(value.span(), format!("{key}.{name}: {why}"));
            }
            if *value.get_ref() < 0 {
                return self.error(
                    value.span(),
                    format!("{key}.{name}: must be at least 0, got {}", value.get_ref()),
                );
            }
            out.insert(name.clone(), *value.get_ref() as u64);
        }
        Ok(out)
    }
}

fn is_class(c: &str) -> bool {
    let b = c.as_bytes();
    b.len() == 3 && (b'1'..=b'5').contains(&b[0]) && b[1..].eq_ignore_ascii_case(b"xx")
}

fn known_segment(tiers: &KnownTiers, s: &str) -> std::result::Result<(), String> {
    if tiers.segments.iter().any(|t| t == s) {
        return Ok(());
    }
    Err(format!(
        "unknown segment `{s}` (defined: {})",
        if tiers.segments.is_empty() {
            "none".to_string()
        } else {
            tiers.segments.join(", ")
        }
    ))
}

/// The options that merge values, as the config writes them (`normalize = "email"`,
/// `prefix = 6`).
fn part_options(part: &crate::config::KeyPartSpec) -> String {
    let mut options = Vec::new();
    if let Some(n) = part.normalize {
        options.push(format!("normalize = \"{}\"", n.name()));
    }
    if let Some(p) = part.prefix {
        options.push(format!("prefix = {p}"));
    }
    options.join(", ")
}
