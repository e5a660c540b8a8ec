//! Envoy's unit codes (`SECOND` = 1 ... `YEAR`) and slidegate's windows, both ways.

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;

use crate::config::RlsUnit;

/// The unit Envoy's code names (`SECOND` = 1 ... `WEEK` = 7), if it names one.
pub fn unit_of_code(code: i32) -> Option<RlsUnit> {
    Some(match Unit::try_from(code).ok()? {
        Unit::Unknown => return None,
        Unit::Second => RlsUnit::Second,
        Unit::Minute => RlsUnit::Minute,
        Unit::Hour => RlsUnit::Hour,
        Unit::Day => RlsUnit::Day,
        Unit::Week => RlsUnit::Week,
        Unit::Month => RlsUnit::Month,
        Unit::Year => RlsUnit::Year,
    })
}

/// The code of the unit whose window is `window`; `UNKNOWN` for a window that is none.
pub fn code_of_window(window: Duration) -> i32 {
    let unit = match RlsUnit::of_window(window) {
        None => Unit::Unknown,
        Some(RlsUnit::Second) => Unit::Second,
        Some(RlsUnit::Minute) => Unit::Minute,
        Some(RlsUnit::Hour) => Unit::Hour,
        Some(RlsUnit::Day) => Unit::Day,
        Some(RlsUnit::Week) => Unit::Week,
        Some(RlsUnit::Month) => Unit::Month,
        Some(RlsUnit::Year) => Unit::Year,
    };
    unit as i32
}
