//! `dionfs stats`, `dionfs exportfs -v` and `dionfs clients`: each asks
//! the running server, over its metrics listener, what it serves now.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dionfs_core::export::config::metrics_listen_of;
use dionfs_core::export::STATS_ADDRESS;
use dionfs_server::callstats::{self, ProcLine};

/// The config a packaged server reads; its `metrics_listen` is where
/// the tools look when given neither --metrics nor --config.
pub const DEFAULT_CONFIG: &str = "/etc/dionfs.toml";

/// Where the running server's metrics listener is: `metrics` if given,
/// else the `metrics_listen` of `config` (an error if it serves none),
/// else that of [`DEFAULT_CONFIG`] if it exists and sets one, else
/// [`STATS_ADDRESS`] (where `dionfs serve DIR` serves them by default).
pub fn server_address(metrics: Option<&str>, config: Option<&Path>) -> Result<String, String> {
    if let Some(m) = metrics {
        return Ok(m.to_string());
    }
    if let Some(file) = config {
        return match metrics_listen_of(file).map_err(|e| e.to_string())? {
            Some(addr) => Ok(addr.to_string()),
            None => Err(format!(
                "{}: no metrics_listen: the server serves no metrics for the tools to read; \
                 set metrics_listen = \"{STATS_ADDRESS}\" and restart it",
                file.display()
            )),
        };
    }
    let default = Path::new(DEFAULT_CONFIG);
    if default.exists() {
        if let Ok(Some(addr)) = metrics_listen_of(default) {
            return Ok(addr.to_string());
        }
    }
    Ok(STATS_ADDRESS.to_string())
}

/// `path` from the server at `addr`, or an error that says what to start
/// or configure when no server answers there.
pub fn ask(addr: &str, path: &str) -> Result<String, String> {
    dionfs_server::metrics::fetch_path(addr, path).map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::TimedOut => format!(
            "no dionfs server answers at {addr} ({e}). Start one (`dionfs serve DIR` \
                 serves its metrics there; `systemctl start dionfs` with metrics_listen in \
                 {DEFAULT_CONFIG}), or point at the one running with --metrics ADDR:PORT"
        ),
        _ => format!("cannot read {addr}: {e}"),
    })
}

/// `stats_args` of `dionfs stats`.
pub struct StatsArgs {
    pub addr: String,
    pub raw: bool,
    /// Seconds between reports (like `nfsstat -s 5`); each shows the calls
    /// since the one before.
    pub interval: Option<u64>,
    /// Reports to print in interval mode (default: until interrupted).
    pub count: Option<u64>,
}

/// `dionfs stats`.
pub fn stats(args: StatsArgs) -> ExitCode {
    let programs = dionfs_server::dispatch::counted_programs();
    let fail = |e: String| {
        eprintln!("dionfs stats: {e}");
        ExitCode::FAILURE
    };
    let text = match ask(&args.addr, "/metrics") {
        Ok(t) => t,
        Err(e) => return fail(format!("{e} or --config FILE (its metrics_listen)")),
    };
    if args.raw {
        print!("{text}");
        return ExitCode::SUCCESS;
    }
    let mut before = callstats::parse(&text);
    let Some(secs) = args.interval else {
        print!("{}", callstats::table(&before, &programs));
        return ExitCode::SUCCESS;
    };
    let every = Duration::from_secs(secs.max(1));
    let mut next = Instant::now() + every;
    let mut printed = 0;
    while args.count.is_none_or(|n| printed < n) {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += every;
        let now = match ask(&args.addr, "/metrics") {
            Ok(t) => callstats::parse(&t),
            Err(e) => return fail(e),
        };
        let lines = delta(&now, &before);
        println!("-- calls in the last {secs} s --");
        print!("{}", callstats::table(&lines, &programs));
        let _ = std::io::stdout().flush();
        before = now;
        printed += 1;
    }
    ExitCode::SUCCESS
}

/// The calls of `now` since `before`: counts and buckets less those of
/// the same procedure then (a procedure new since is all new; a server
/// restarted in between, counting less, counts from zero).
pub fn delta(now: &[ProcLine], before: &[ProcLine]) -> Vec<ProcLine> {
    now.iter()
        .map(|l| {
            let prev = before
                .iter()
                .find(|b| b.program == l.program && b.procedure == l.procedure)
                .filter(|b| b.count <= l.count && b.buckets.len() == l.buckets.len());
            let Some(prev) = prev else {
                return l.clone();
            };
            ProcLine {
                program: l.program.clone(),
                procedure: l.procedure.clone(),
                count: l.count - prev.count,
                buckets: l
                    .buckets
                    .iter()
                    .zip(&prev.buckets)
                    .map(|(&(bound, n), &(_, m))| (bound, n.saturating_sub(m)))
                    .collect(),
            }
        })
        .collect()
}

/// `dionfs exportfs -v` against the running server at `addr`.
pub fn exportfs(addr: &str) -> ExitCode {
    match ask(addr, "/exports") {
        Ok(text) => {
            println!("# The exports the dionfs server at {addr} applies now.");
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "dionfs exportfs: {e}; `--config FILE` lists a config's exports without a server"
            );
            ExitCode::FAILURE
        }
    }
}

/// `dionfs clients`.
pub fn clients(addr: &str, json: bool) -> ExitCode {
    let path = if json { "/clients.json" } else { "/clients" };
    match ask(addr, path) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dionfs clients: {e} or --config FILE (its metrics_listen)");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(procedure: &str, count: u64, buckets: &[u64]) -> ProcLine {
        ProcLine {
            program: "nfs3".into(),
            procedure: procedure.into(),
            count,
            buckets: buckets
                .iter()
                .enumerate()
                .map(|(i, &n)| (i as f64, n))
                .collect(),
        }
    }

    #[test]
    fn delta_counts_the_calls_since_and_new_procedures_whole() {
        let before = [line("READ", 5, &[2, 5])];
        let now = [line("READ", 9, &[3, 9]), line("WRITE", 2, &[2, 2])];
        let d = delta(&now, &before);
        assert_eq!(d[0], line("READ", 4, &[1, 4]));
        assert_eq!(d[1], line("WRITE", 2, &[2, 2]));
        // A restarted server counts less than before: from zero.
        assert_eq!(delta(&before, &now)[0], line("READ", 5, &[2, 5]));
    }

    #[test]
    fn an_explicit_address_wins_and_a_config_without_metrics_is_an_error() {
        assert_eq!(
            server_address(Some("1.2.3.4:5"), None).unwrap(),
            "1.2.3.4:5"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "[server]\nmetrics_listen = \"127.0.0.1:9100\"\n").unwrap();
        assert_eq!(server_address(None, Some(&file)).unwrap(), "127.0.0.1:9100");
        std::fs::write(&file, "[server]\nnfs_port = 2049\n").unwrap();
        let e = server_address(None, Some(&file)).unwrap_err();
        assert!(e.contains("no metrics_listen"), "{e}");
    }
}
