//! The process metrics (`process_*`, the README's "Metrics"): the prometheus crate's collector, with its
//! `process_cpu_seconds_total` (whole seconds only: a gateway that has spent 0.9 s of CPU shows
//! 0) replaced by one to the clock tick.

use prometheus::core::{Collector, Desc};
use prometheus::process_collector::ProcessCollector;
use prometheus::proto::MetricFamily;
use prometheus::Counter;

/// The name of the family this collector replaces.
const CPU_SECONDS: &str = "process_cpu_seconds_total";

/// This process's CPU, memory, descriptors, threads and start time.
pub struct ProcessMetrics {
    inner: ProcessCollector,
    cpu_seconds: Counter,
}

impl ProcessMetrics {
    /// The metrics of the calling process.
    pub fn for_self() -> ProcessMetrics {
        ProcessMetrics {
            inner: ProcessCollector::for_self(),
            // The crate's help text: the family's description stays the one its desc announces.
            cpu_seconds: Counter::new(
                CPU_SECONDS,
                "Total user and system CPU time spent in seconds.",
            )
            .expect("a valid counter"),
        }
    }
}

impl Collector for ProcessMetrics {
    fn desc(&self) -> Vec<&Desc> {
        self.inner.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut families = self.inner.collect();
        let Some(seconds) = cpu_seconds() else {
            return families;
        };
        // Two scrapes at once may both add: the counter only ever moves up to the truth.
        self.cpu_seconds
            .inc_by((seconds - self.cpu_seconds.get()).max(0.0));
        for family in &mut families {
            if family.name() == CPU_SECONDS {
                if let Some(precise) = self.cpu_seconds.collect().pop() {
                    *family = precise;
                }
            }
        }
        families
    }
}

/// User and system CPU seconds of this process, from `/proc/self/stat` (fields 14 and 15, in
/// clock ticks).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces: the fields after it start past its `)`.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| (utime + stime) / ticks as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The family carries this process's CPU time to the tick, not truncated to whole seconds
    /// (a truncated value is off by its fraction, 0.05 s or more nineteen times in twenty).
    #[test]
    fn cpu_seconds_are_exported_to_the_tick() {
        // Some CPU to show: at least a few clock ticks of work.
        let started = cpu_seconds().expect("readable on linux");
        let mut x = 1u64;
        for _ in 0..10_000 {
            if cpu_seconds().unwrap() >= started + 0.03 {
                break;
            }
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
            }
        }
        let metrics = ProcessMetrics::for_self();
        let families = metrics.collect();
        let family = families
            .iter()
            .find(|f| f.name() == CPU_SECONDS)
            .expect("the family is exported");
        let exported = family.get_metric()[0].get_counter().get_value();
        let now = cpu_seconds().expect("readable on linux");
        assert!(exported > 0.0);
        assert!(
            (now - exported).abs() < 0.05,
            "exported {exported} s, read {now} s"
        );
    }
}
