//! `[segments.*]` and `[plans]`: the members files they name, read at load (and on every
//! reload), so `check` and a reload see every problem in them.

use std::collections::HashMap;

use super::{Result, Validator};
use crate::config::raw::RawConfig;
use crate::config::{ConfigError, Location, TierFiles, UnknownPlan};
use crate::tier::{self, Membership};

impl Validator<'_> {
    /// `[segments.*]` and `[plans]`: their files, read now, so `check` and a reload see every
    /// problem in them.
    pub(super) fn tiers(&self, raw: &RawConfig) -> Result<(TierFiles, Membership, UnknownPlan)> {
        let mut files = TierFiles::default();
        let mut segments = Vec::with_capacity(raw.segments.len());
        // `[segments.*]` tables keep file order: sort by where they stand in the file.
        let mut ordered: Vec<_> = raw.segments.iter().collect();
        ordered.sort_by_key(|(_, s)| s.span().start);
        for (name, segment) in ordered {
            let key = format!("segments.{name}");
            self.check_name(name, segment.span(), &key)?;
            let file = &segment.get_ref().members_file;
            let path = self.dir.join(file.get_ref());
            let members = tier::read_segment(&path)
                .or_else(|why| self.error(file.span(), format!("{key}.members_file: {why}")))?;
            files.segments.push((name.clone(), path));
            segments.push((name.clone(), members));
        }
        let mut plans = HashMap::new();
        let mut unknown = UnknownPlan::Default;
        if let Some(p) = &raw.plans {
            let file = &p.get_ref().members_file;
            let path = self.dir.join(file.get_ref());
            plans = match tier::read_plans(&path) {
                Ok(plans) => plans,
                // a line of the plans file is wrong: its place in that file
                Err(tier::PlansFileError {
                    message,
                    at: Some((text, span)),
                }) => {
                    let at = Location::from_span(&path.display().to_string(), &text, span);
                    return Err(ConfigError::Invalid { at, message });
                }
                Err(e) => {
                    let why = e.message;
                    return self.error(file.span(), format!("plans.members_file: {why}"));
                }
            };
            files.plans = Some(path);
            unknown = self.choice(
                p.get_ref().unknown.as_ref(),
                "plans.unknown",
                "value",
                UnknownPlan::NAMES,
                UnknownPlan::Default,
            )?;
        }
        Ok((files, Membership::new(segments, plans), unknown))
    }
}
