//! The settings of limits that need the answer: a concurrency limit's `lease` (and no
//! `window`), `cost_from` and its reservation `cost`, and the route-level rules they bring
//! (one reservation per route, `max_cost_body_bytes`).

use std::time::Duration;

use toml::Spanned;

use super::{Result, Validator, MAX_WINDOW};
use crate::algorithm::AlgorithmId;
use crate::config::raw::{RawCost, RawLimit, RawRoute};
use crate::config::{ExceedMode, LimitConfig};
use crate::cost::{CostFrom, Reserve, DEFAULT_MAX_COST_BODY_BYTES};

/// What a lease outlives the upstream's `timeout` by unless the limit says.
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);

impl Validator<'_> {
    /// A limit's window, or a concurrency limit's lease (default: `answer_wait` plus 5 s), which
    /// takes the window's place in the store.
    pub(super) fn window_or_lease(
        &mut self,
        l: &RawLimit,
        key: &str,
        span: std::ops::Range<usize>,
        algorithm: AlgorithmId,
        answer_wait: Duration,
    ) -> Result<Duration> {
        if algorithm.get().has_window() {
            let Some(window) = &l.window else {
                return self.error(
                    span.start..span.start,
                    format!("{key}: missing field `window`"),
                );
            };
            if let Some(lease) = &l.lease {
                self.warn(
                    lease.span(),
                    format!(
                        "{key}.lease is ignored: only algorithm = \"concurrency\" takes a lease"
                    ),
                );
            }
            let min = Duration::from_millis(1);
            return self.duration_in(Some(window), &format!("{key}.window"), min, MAX_WINDOW, min);
        }
        if let Some(window) = &l.window {
            return self.error(
                window.span(),
                format!("{key}.window: a concurrency limit counts attempts in flight, not a window: remove it (an attempt holds its slot until its answer has been sent, or `lease` at most)"),
            );
        }
        self.duration_in(
            l.lease.as_ref(),
            &format!("{key}.lease"),
            Duration::from_millis(1),
            MAX_WINDOW,
            answer_wait + LEASE_MARGIN,
        )
    }

    /// What a limit's algorithm rules out beside it: a concurrency limit counts no outcomes and
    /// no costs, and has no room to wait for on a delay route.
    pub(super) fn algorithm_rules(
        &self,
        l: &RawLimit,
        key: &str,
        algorithm: AlgorithmId,
        mode: &ExceedMode,
    ) -> Result<()> {
        if algorithm.get().has_window() {
            return Ok(());
        }
        let named = [
            ("count_status", l.count_status.as_ref().map(Spanned::span)),
            ("reset_status", l.reset_status.as_ref().map(Spanned::span)),
            ("cost_from", l.cost_from.as_ref().map(Spanned::span)),
            ("cost", l.cost.as_ref().map(Spanned::span)),
        ];
        if let Some((name, Some(span))) = named.into_iter().find(|(_, s)| s.is_some()) {
            return self.error(
                span,
                format!("{key}.{name}: a concurrency limit counts attempts in flight, whatever their answer says: {name} belongs on a window limit"),
            );
        }
        if let (ExceedMode::Delay { .. }, Some(a)) = (mode, &l.algorithm) {
            return self.error(
                a.span(),
                format!("{key}.algorithm: \"concurrency\" cannot be used on a \"delay\" route: a slot frees when some answer ends, which no one can foresee, so a waiting request would have to ask the store again and again while holding its client's connection open (use \"reject\": a full key gets 429 with Retry-After: 1)"),
            );
        }
        Ok(())
    }

    /// `cost_from` and `cost` of a limit that takes at most `limit` units at once (its `limit`,
    /// or its `burst` when smaller).
    pub(super) fn cost_settings(
        &self,
        l: &RawLimit,
        key: &str,
        limit: u64,
    ) -> Result<(Option<CostFrom>, Reserve)> {
        let Some(from) = &l.cost_from else {
            if let Some(cost) = &l.cost {
                return self.error(
                    cost.span(),
                    format!("{key}.cost: is what an attempt reserves until its answer states its cost: it needs cost_from"),
                );
            }
            return Ok((None, Reserve::Units(1)));
        };
        let parsed = CostFrom::parse(from.get_ref())
            .or_else(|why| self.error(from.span(), format!("{key}.cost_from: {why}")))?;
        if let Some(reset) = &l.reset_status {
            return self.error(
                reset.span(),
                format!("{key}.reset_status: cannot be used with cost_from (a reset forgives answered attempts, and this limit counts what they cost)"),
            );
        }
        let reserve = match l.cost.as_ref().map(|c| (c, c.get_ref())) {
            None => Reserve::Units(1),
            Some((c, RawCost::Units(n))) if *n < 1 || *n as u64 > limit => {
                return self.error(
                    c.span(),
                    format!("{key}.cost: must be between 1 and {limit} (the limit, or its burst when smaller), got {n} (a larger reservation could never be allowed)"),
                )
            }
            Some((_, RawCost::Units(n))) => Reserve::Units(*n as u64),
            Some((c, RawCost::Text(text))) => Reserve::parse(text)
                .or_else(|why| self.error(c.span(), format!("{key}.cost: {why}")))?,
        };
        Ok((Some(parsed), reserve))
    }

    /// The route's rules for costs from answers: its `cost_from` limits share one reservation
    /// (an attempt is charged one amount), and `max_cost_body_bytes` bounds their body readers.
    pub(super) fn route_costs(
        &mut self,
        r: &RawRoute,
        at: &str,
        limits: &[LimitConfig],
    ) -> Result<usize> {
        let costed: Vec<usize> = (0..limits.len())
            .filter(|&i| limits[i].cost_from.is_some())
            .collect();
        if let Some(&first) = costed.first() {
            if let Some(&other) = costed
                .iter()
                .find(|&&i| limits[i].cost != limits[first].cost)
            {
                let raw = r.limits[other].get_ref();
                let span = raw.cost.as_ref().map_or(raw.name.span(), |c| c.span());
                return self.error(
                    span,
                    format!("{at}.limits[{other}].cost: the limits with cost_from of one route reserve one amount per attempt, but `{}` reserves {} and `{}` reserves {}", limits[other].name, limits[other].cost, limits[first].name, limits[first].cost),
                );
            }
        }
        let max = self.integer_in(
            r.max_cost_body_bytes.as_ref(),
            &format!("{at}.max_cost_body_bytes"),
            1,
            64 * 1024 * 1024,
            DEFAULT_MAX_COST_BODY_BYTES as i64,
        )? as usize;
        let reads_body = limits
            .iter()
            .any(|l| l.cost_from.as_ref().is_some_and(CostFrom::reads_body));
        if let (Some(v), false) = (&r.max_cost_body_bytes, reads_body) {
            self.warn(
                v.span(),
                format!("{at}.max_cost_body_bytes is ignored: no limit of the route reads its cost from the body (cost_from = \"json:...\" or \"sse:...\")"),
            );
        }
        Ok(max)
    }
}
