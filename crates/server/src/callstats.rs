//! Per-procedure call counts and service times (`dionfs stats`, like
//! `nfsstat -s` with latency percentiles): for each procedure of the
//! programs served (and each NFSv4 operation, counted as its COMPOUND's
//! procedures are), how many calls ran and a histogram of the time from the
//! start of their execution to their reply, exported as the Prometheus
//! histogram `dionfs_call_seconds` (`metrics.rs` encodes it). Recording is
//! two relaxed atomic adds, on the recording thread's shard.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::program::ProgramSummary;

/// Upper bounds of the histogram's buckets, in microseconds (1-2-5 per
/// decade, 10 µs to 10 s); past the last, `+Inf`.
pub const BOUNDS_US: [u64; 19] = [
    10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000,
    500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000,
];

#[derive(Default)]
struct ProcStat {
    sum_us: AtomicU64,
    /// Calls per bucket (not cumulative); the last is `+Inf`. Their sum
    /// is the procedure's count, so a scrape's `_count` is always its
    /// `+Inf` bucket, as OpenMetrics requires, even with calls recorded
    /// while it reads.
    buckets: [AtomicU64; BOUNDS_US.len() + 1],
}

/// Shards of the statistics: each thread records into one (its own while
/// there are no more threads than shards), so that two threads recording
/// at once do not pass the same cache lines back and forth. An NFSv4
/// COMPOUND records each of its ops (four or five for a WRITE): on one
/// shared table, its adds were 1% of the server's samples over v4.1 on
/// 4 KiB random WRITEs at qd 64.
const SHARDS: usize = 8;

/// The server's call statistics, per procedure of the programs counted.
pub struct CallStats {
    /// The programs, each with the index of its first procedure in a
    /// shard.
    programs: Vec<(ProgramSummary, usize)>,
    /// Every procedure's statistics, once per shard; a scrape adds the
    /// shards up.
    shards: Box<[Box<[ProcStat]>]>,
}

/// The shard the calling thread records into.
fn shard() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|shard| *shard)
}

/// `took` in whole microseconds, without `as_micros`' 128-bit division.
fn micros(took: Duration) -> u64 {
    took.as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(took.subsec_micros()))
}

impl CallStats {
    /// Statistics of `programs`' procedures, none counted yet.
    pub fn new(programs: Vec<ProgramSummary>) -> CallStats {
        let mut procedures = 0;
        let programs: Vec<_> = programs
            .into_iter()
            .map(|p| {
                let first = procedures;
                procedures += p.names.len();
                (p, first)
            })
            .collect();
        let shards = (0..SHARDS)
            .map(|_| (0..procedures).map(|_| ProcStat::default()).collect())
            .collect();
        CallStats { programs, shards }
    }

    /// Counts one call of `proc_` of `prog` version `vers` that took
    /// `took`. Other programs and unknown procedures are not counted.
    pub fn record(&self, prog: u32, vers: u32, proc_: u32, took: Duration) {
        self.record_all(prog, vers, &[(proc_, took)]);
    }

    /// [`Self::record`] of each of `calls` (procedure and time), all of
    /// one program: the ops of a COMPOUND, the program and shard found
    /// once.
    pub fn record_all(&self, prog: u32, vers: u32, calls: &[(u32, Duration)]) {
        let found = self
            .programs
            .iter()
            .find(|(p, _)| (p.number, p.version) == (prog, vers));
        let Some((program, first)) = found else {
            return;
        };
        let shard = &self.shards[shard()];
        for &(proc_, took) in calls {
            if proc_ as usize >= program.names.len() {
                continue;
            }
            let stat = &shard[first + proc_ as usize];
            let us = micros(took);
            // Most of a COMPOUND's ops are counted with no time (SEQUENCE,
            // PUTFH): no search for them.
            let bucket = if us < BOUNDS_US[0] {
                0
            } else {
                BOUNDS_US.partition_point(|&b| b < us)
            };
            if us > 0 {
                stat.sum_us.fetch_add(us, Ordering::Relaxed);
            }
            stat.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The procedures that have had calls, as counted now: what the
    /// metrics endpoint exports (`metrics.rs`).
    pub fn histograms(&self) -> impl Iterator<Item = Histogram> + '_ {
        let shards = &self.shards;
        self.programs.iter().flat_map(move |&(ref program, first)| {
            program
                .names
                .iter()
                .enumerate()
                .filter_map(move |(i, &procedure)| {
                    let stats = || shards.iter().map(|shard| &shard[first + i]);
                    let buckets: [u64; BOUNDS_US.len() + 1] = std::array::from_fn(|b| {
                        stats().map(|s| s.buckets[b].load(Ordering::Relaxed)).sum()
                    });
                    let count = buckets.iter().sum();
                    let sum_us: u64 = stats().map(|s| s.sum_us.load(Ordering::Relaxed)).sum();
                    (count > 0).then(|| Histogram {
                        program: program.label,
                        procedure,
                        count,
                        sum: sum_us as f64 / 1e6,
                        buckets,
                    })
                })
        })
    }
}

/// One procedure's calls and their times, as read at a scrape (a call
/// recorded while they are read may be in `sum` and not yet in `buckets`,
/// or the other way round).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// The program's label, `nfs3` say ([`ProgramSummary::label`]).
    pub program: &'static str,
    pub procedure: &'static str,
    /// The calls: the sum of `buckets`.
    pub count: u64,
    /// The calls' times added up, in seconds.
    pub sum: f64,
    /// Calls per bucket of [`BOUNDS_US`] (not cumulative); the last is
    /// past the last bound.
    pub buckets: [u64; BOUNDS_US.len() + 1],
}

/// One procedure's line of `dionfs stats`, read back from the metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcLine {
    pub program: String,
    pub procedure: String,
    pub count: u64,
    /// (upper bound in seconds, cumulative count), `+Inf` as infinity.
    pub buckets: Vec<(f64, u64)>,
}

impl ProcLine {
    /// The `q` quantile (0..1) in seconds, interpolated linearly inside
    /// its bucket as Prometheus' `histogram_quantile` does; `None` with
    /// no calls, the last finite bound when it falls past it.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = q * self.count as f64;
        let mut lower = (0.0, 0u64);
        for &(bound, cumulative) in &self.buckets {
            if cumulative as f64 >= rank {
                if bound.is_infinite() {
                    return Some(lower.0);
                }
                let inside = (cumulative - lower.1) as f64;
                let frac = if inside > 0.0 {
                    (rank - lower.1 as f64) / inside
                } else {
                    1.0
                };
                return Some(lower.0 + (bound - lower.0) * frac.clamp(0.0, 1.0));
            }
            lower = (bound, cumulative);
        }
        Some(lower.0)
    }
}

/// The per-procedure lines of a metrics text (`dionfs_call_seconds`).
pub fn parse(text: &str) -> Vec<ProcLine> {
    let mut lines: Vec<ProcLine> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("dionfs_call_seconds_bucket{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |key: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix("=\"")?.strip_suffix('"'))
                .map(str::to_string)
        };
        let (Some(program), Some(procedure), Some(le), Ok(value)) = (
            label("program"),
            label("procedure"),
            label("le"),
            value.trim().parse::<u64>(),
        ) else {
            continue;
        };
        let bound = if le == "+Inf" {
            f64::INFINITY
        } else {
            match le.parse() {
                Ok(b) => b,
                Err(_) => continue,
            }
        };
        match lines
            .iter_mut()
            .find(|l| l.program == program && l.procedure == procedure)
        {
            Some(l) => l.buckets.push((bound, value)),
            None => lines.push(ProcLine {
                program,
                procedure,
                count: 0,
                buckets: vec![(bound, value)],
            }),
        }
    }
    for l in &mut lines {
        l.count = l.buckets.iter().map(|b| b.1).max().unwrap_or(0);
    }
    lines
}

/// `dionfs stats`: a table per program of `programs`, as `nfsstat -s`
/// prints counts, with service-time percentiles. A program whose calls
/// carry operations (NFSv4's COMPOUND) gets a second table, of its
/// operations, each counted as its own call would be.
pub fn table(lines: &[ProcLine], programs: &[ProgramSummary]) -> String {
    let mut out = String::new();
    for program in programs {
        let title = program.title;
        let (operations, procedures): (Vec<_>, Vec<_>) = lines
            .iter()
            .filter(|l| l.program == program.label)
            .partition(|l| program.is_operation(&l.procedure));
        let total: u64 = procedures.iter().map(|l| l.count).sum();
        let _ = writeln!(out, "{title} calls: {total} (time from execution to reply)");
        rows(&mut out, "procedure", &procedures);
        if program.first_operation.is_some() {
            let total: u64 = operations.iter().map(|l| l.count).sum();
            let _ = writeln!(out, "{title} operations: {total}");
            rows(&mut out, "operation", &operations);
        }
    }
    out
}

/// The rows of one table: each line's calls, share and percentiles.
fn rows(out: &mut String, what: &str, lines: &[&ProcLine]) {
    if lines.is_empty() {
        return;
    }
    let total: u64 = lines.iter().map(|l| l.count).sum();
    // As wide as the longest name (NFSv4's run to 20 characters).
    let width = lines
        .iter()
        .map(|l| l.procedure.len())
        .max()
        .unwrap_or(0)
        .max(12);
    let _ = writeln!(
        out,
        "  {:<width$} {:>10} {:>6} {:>10} {:>10} {:>10}",
        what, "calls", "%", "p50", "p90", "p99"
    );
    for l in lines {
        let pct = 100.0 * l.count as f64 / total.max(1) as f64;
        let q = |q| l.quantile(q).map_or("-".to_string(), human);
        let _ = writeln!(
            out,
            "  {:<width$} {:>10} {:>5.1}% {:>10} {:>10} {:>10}",
            l.procedure,
            l.count,
            pct,
            q(0.5),
            q(0.9),
            q(0.99)
        );
    }
}

fn human(seconds: f64) -> String {
    if seconds < 1e-3 {
        format!("{:.0} µs", seconds * 1e6)
    } else if seconds < 1.0 {
        format!("{:.1} ms", seconds * 1e3)
    } else {
        format!("{seconds:.2} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dionfs_proto::mount3::MOUNT_PROGRAM;
    use dionfs_proto::nfs3::NFS_PROGRAM;
    use prometheus_client::registry::Registry;
    use std::sync::Arc;

    #[test]
    fn record_render_parse_and_quantiles() {
        let stats = CallStats::new(crate::dispatch::counted_programs());
        // 90 READs of 15 µs, 10 of 3 ms; 1 MNT; nothing else shown.
        for _ in 0..90 {
            stats.record(NFS_PROGRAM, 3, 6, Duration::from_micros(15));
        }
        for _ in 0..10 {
            stats.record(NFS_PROGRAM, 3, 6, Duration::from_millis(3));
        }
        stats.record(MOUNT_PROGRAM, 3, 1, Duration::from_secs(20));
        stats.record(NFS_PROGRAM, 3, 99, Duration::from_micros(1));
        stats.record(100_000, 1, 0, Duration::from_micros(1));
        let mut registry = Registry::with_prefix("dionfs");
        registry.register_collector(Box::new(crate::metrics::CallHistogram(Arc::new(stats))));
        let text = crate::metrics::render(&registry).unwrap();
        // prometheus-client writes `le` before the family's labels.
        assert!(text.contains(
            "dionfs_call_seconds_bucket{le=\"0.00002\",program=\"nfs3\",procedure=\"READ\"} 90"
        ));
        assert!(text.contains("dionfs_call_seconds_count{program=\"nfs3\",procedure=\"READ\"} 100"));
        assert!(!text.contains("GETATTR"));
        let lines = parse(&text);
        assert_eq!(lines.len(), 2);
        let read = &lines[0];
        assert_eq!((read.procedure.as_str(), read.count), ("READ", 100));
        // p50 inside the 10-20 µs bucket, p99 inside the 2-5 ms one.
        let p50 = read.quantile(0.5).unwrap();
        assert!((10e-6..=20e-6).contains(&p50), "{p50}");
        let p99 = read.quantile(0.99).unwrap();
        assert!((2e-3..=5e-3).contains(&p99), "{p99}");
        // Past the last bound: the last bound.
        assert_eq!(lines[1].quantile(0.5), Some(10.0));
        let table = table(&lines, &crate::dispatch::counted_programs());
        assert!(table.contains("NFS v3 calls: 100"), "{table}");
        assert!(table.contains("READ"), "{table}");
        assert!(table.contains("MOUNT v3 calls: 1"), "{table}");
        // Garbage never panics.
        let _ = parse("dionfs_call_seconds_bucket{le=\"x\"} y\ndionfs_call_seconds_bucket{");
    }

    #[test]
    fn calls_recorded_on_many_threads_are_added_up() {
        let stats = CallStats::new(crate::dispatch::counted_programs());
        // More threads than shards: some share one.
        std::thread::scope(|scope| {
            for t in 0..2 * SHARDS as u64 {
                let stats = &stats;
                scope.spawn(move || {
                    for _ in 0..100 {
                        stats.record(NFS_PROGRAM, 3, 6, Duration::from_micros(12 + t % 8));
                    }
                    stats.record(NFS_PROGRAM, 3, 7, Duration::from_millis(3));
                });
            }
        });
        let all: Vec<Histogram> = stats.histograms().collect();
        assert_eq!(all.len(), 2, "{all:?}");
        let read = all.iter().find(|h| h.procedure == "READ").unwrap();
        assert_eq!(read.count, 1600);
        assert_eq!(read.buckets[1], 1600, "{read:?}");
        let sum_us: u64 = (0..2 * SHARDS as u64).map(|t| 100 * (12 + t % 8)).sum();
        assert!((read.sum - sum_us as f64 / 1e6).abs() < 1e-9, "{read:?}");
        let write = all.iter().find(|h| h.procedure == "WRITE").unwrap();
        assert_eq!((write.count, write.buckets[8]), (16, 16), "{write:?}");
    }

    #[test]
    fn nfs4_operations_are_a_table_of_their_own() {
        // COMPOUNDs are the calls; their ops are counted apart.
        let stats = CallStats::new(crate::dispatch::counted_programs());
        stats.record(NFS_PROGRAM, 4, 1, Duration::from_micros(30));
        stats.record(NFS_PROGRAM, 4, 1, Duration::from_micros(30));
        stats.record(NFS_PROGRAM, 4, 53, Duration::from_micros(2));
        stats.record(NFS_PROGRAM, 4, 53, Duration::from_micros(2));
        stats.record(NFS_PROGRAM, 4, 24, Duration::from_micros(1));
        stats.record(NFS_PROGRAM, 4, 41, Duration::from_micros(1));
        let mut registry = Registry::with_prefix("dionfs");
        registry.register_collector(Box::new(crate::metrics::CallHistogram(Arc::new(stats))));
        let text = crate::metrics::render(&registry).unwrap();
        assert!(
            text.contains("dionfs_call_seconds_count{program=\"nfs4\",procedure=\"SEQUENCE\"} 2")
        );
        let table = super::table(&parse(&text), &crate::dispatch::counted_programs());
        assert!(table.contains("NFS v4 calls: 2"), "{table}");
        assert!(table.contains("NFS v4 operations: 4"), "{table}");
        let row = |name: &str| {
            table
                .lines()
                .find(|l| l.split_whitespace().next() == Some(name))
                .map(str::to_string)
        };
        assert!(row("COMPOUND").unwrap().contains("100.0%"), "{table}");
        assert!(row("SEQUENCE").unwrap().contains("50.0%"), "{table}");
        assert!(row("PUTROOTFH").is_some(), "{table}");
        // Columns line up however long the names.
        stats_aligned(&table);
    }

    #[test]
    fn micros_are_as_std_gives_them() {
        for took in [
            Duration::ZERO,
            Duration::from_nanos(999),
            Duration::from_nanos(1_000),
            Duration::new(3, 999_999_999),
            Duration::from_secs(u64::MAX / 1_000_000),
        ] {
            assert_eq!(u128::from(micros(took)), took.as_micros(), "{took:?}");
        }
        assert_eq!(micros(Duration::MAX), u64::MAX);
    }

    #[test]
    fn a_compound_s_ops_recorded_at_once_count_as_one_by_one() {
        let (one, all) = (
            CallStats::new(crate::dispatch::counted_programs()),
            CallStats::new(crate::dispatch::counted_programs()),
        );
        let ops = [
            (53, Duration::ZERO),
            (22, Duration::ZERO),
            (38, Duration::from_micros(40)),
            // No such op: skipped, the rest counted.
            (100_000, Duration::from_micros(5)),
            (9, Duration::from_micros(3)),
        ];
        for &(op, took) in &ops {
            one.record(NFS_PROGRAM, 4, op, took);
        }
        all.record_all(NFS_PROGRAM, 4, &ops);
        let key = |h: Histogram| (h.procedure, h.count, h.buckets, h.sum.to_bits());
        let (one, all): (Vec<_>, Vec<_>) = (
            one.histograms().map(key).collect(),
            all.histograms().map(key).collect(),
        );
        assert_eq!(one.len(), 4);
        assert_eq!(one, all);
    }

    /// Every row of each table of `table` ends its count where its
    /// header ends `calls`.
    fn stats_aligned(table: &str) {
        let mut calls_end = None;
        for line in table.lines().filter(|l| l.starts_with("  ")) {
            if line.ends_with("p99") {
                calls_end = line.find("calls").map(|i| i + "calls".len());
                continue;
            }
            let name = line.split_whitespace().next().unwrap_or("");
            let count = line[2 + name.len()..].trim_start();
            let count_len = count.split_whitespace().next().unwrap_or("").len();
            assert_eq!(
                Some(line.len() - count.len() + count_len),
                calls_end,
                "{table}"
            );
        }
    }
}
