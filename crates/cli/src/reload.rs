//! `dionfs reload`: tells a running `dionfs serve` to read its
//! configuration file again and apply its exports (SIGHUP; what
//! `systemctl reload dionfs` runs too). The server logs what changed;
//! when it was found by its pid file, it also records the outcome beside
//! it, which this waits for and reports (a failed reload exits 1).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dionfs_core::reload::{Outcome, Phase};
use rustix::process::{kill_process, Pid, Signal};

/// Where `dionfs reload` looks when given neither `--pid` nor
/// `--pid-file`: then, if it does not exist, the one running `dionfs
/// serve` is found in /proc.
pub const DEFAULT_PID_FILE: &str = "/run/dionfs.pid";

/// Which server to reload.
pub enum Target {
    Pid(i32),
    PidFile(PathBuf),
    /// [`DEFAULT_PID_FILE`] if it exists, else the only `dionfs serve`.
    Default,
}

/// How long a reload may take before `dionfs reload` gives up waiting
/// for its outcome (a reload opens the filesystems of added exports).
const WAIT: Duration = Duration::from_secs(60);

/// What `dionfs reload` did.
#[derive(Debug)]
pub struct Done {
    pub pid: i32,
    /// The reload's outcome, when the server was found by its pid file
    /// (without one, the server's log is the only place that says).
    pub outcome: Option<Outcome>,
}

/// Sends SIGHUP to the server `target` names, after checking that it is
/// a `dionfs serve` (a stale pid file may name some other process, for
/// which SIGHUP could be fatal); waits for the outcome the server records
/// beside its pid file, if it was found by one.
pub fn run(target: Target) -> Result<Done, String> {
    let (pid, pid_file) = match target {
        Target::Pid(pid) => (pid, None),
        Target::PidFile(file) => (read_pid_file(&file)?, Some(file)),
        Target::Default if Path::new(DEFAULT_PID_FILE).exists() => {
            let file = PathBuf::from(DEFAULT_PID_FILE);
            (read_pid_file(&file)?, Some(file))
        }
        Target::Default => (find_server()?, None),
    };
    match command_line(pid) {
        Some(args) if is_dionfs_serve(&args) => {}
        Some(args) => {
            return Err(format!(
                "process {pid} is `{}`, not a `dionfs serve`",
                args.join(" ")
            ))
        }
        None => return Err(format!("no process {pid} is running")),
    }
    // The last reload before this one (none is 0), done or running: one
    // running may have read the file before the edit this reload is for.
    let before = pid_file
        .as_deref()
        .and_then(Outcome::read)
        .filter(|o| o.pid == pid as u32)
        .map_or(0, |o| o.generation);
    let target = Pid::from_raw(pid).ok_or_else(|| format!("{pid} is not a process id"))?;
    kill_process(target, Signal::HUP).map_err(|e| match e {
        rustix::io::Errno::SRCH => format!("process {pid} is gone"),
        rustix::io::Errno::PERM => {
            format!("not allowed to signal process {pid}: run as root or as the server's user")
        }
        e => format!("cannot signal process {pid}: {e}"),
    })?;
    let Some(file) = pid_file else {
        return Ok(Done { pid, outcome: None });
    };
    let deadline = Instant::now() + WAIT;
    loop {
        match Outcome::read(&file) {
            Some(o)
                if o.pid == pid as u32 && o.generation > before && o.phase != Phase::Running =>
            {
                return Ok(Done {
                    pid,
                    outcome: Some(o),
                })
            }
            _ if command_line(pid).is_none() => {
                return Err(format!("process {pid} ended before it reloaded"))
            }
            _ if Instant::now() >= deadline => {
                return Err(format!(
                    "process {pid} has not reloaded within {} s (no outcome in {}); \
                     its log says why",
                    WAIT.as_secs(),
                    Outcome::file(&file).display()
                ))
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The pid a pid file holds (`dionfs serve --pid-file` writes one line).
fn read_pid_file(file: &Path) -> Result<i32, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read pid file {}: {e}", file.display()))?;
    parse_pid(&text).ok_or_else(|| {
        format!(
            "pid file {} holds `{}`, not a process id",
            file.display(),
            text.trim()
        )
    })
}

fn parse_pid(text: &str) -> Option<i32> {
    text.trim().parse().ok().filter(|&pid| pid > 0)
}

/// The only running `dionfs serve` (other than this process).
fn find_server() -> Result<i32, String> {
    let me = std::process::id() as i32;
    let entries = std::fs::read_dir("/proc").map_err(|e| format!("cannot list /proc: {e}"))?;
    let mut found: Vec<i32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| command_line(pid).is_some_and(|args| is_dionfs_serve(&args)))
        .collect();
    found.sort_unstable();
    match found[..] {
        [pid] => Ok(pid),
        [] => Err(format!(
            "no running `dionfs serve` found (and no {DEFAULT_PID_FILE}): give --pid or --pid-file"
        )),
        _ => Err(format!(
            "several `dionfs serve` processes run (pids {}): give --pid or --pid-file",
            found
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The arguments process `pid` was started with; `None` if there is no
/// such process (or it is a kernel thread, which has none).
fn command_line(pid: i32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!args.is_empty()).then_some(args)
}

/// Whether `args` are those of `dionfs serve ...` (the program by any
/// path).
fn is_dionfs_serve(args: &[String]) -> bool {
    // A copy of the binary under another name (`dionfs-head`, as the
    // benchmarks run it) is a server too.
    let program = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str());
    program.is_some_and(|n| n.starts_with("dionfs")) && args.get(1).is_some_and(|a| a == "serve")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn recognises_dionfs_serve_by_any_path() {
        assert!(is_dionfs_serve(&args(&[
            "dionfs", "serve", "--config", "x"
        ])));
        assert!(is_dionfs_serve(&args(&[
            "/usr/local/bin/dionfs",
            "serve",
            "/srv"
        ])));
        assert!(!is_dionfs_serve(&args(&["dionfs", "reload"])));
        assert!(!is_dionfs_serve(&args(&["dionfs"])));
        assert!(!is_dionfs_serve(&args(&["/usr/bin/python3", "serve"])));
        assert!(is_dionfs_serve(&args(&[
            "/tmp/dionfs-head",
            "serve",
            "/srv"
        ])));
        assert!(!is_dionfs_serve(&args(&["/bin/notdionfs", "serve"])));
        assert!(!is_dionfs_serve(&[]));
    }

    #[test]
    fn pid_files_hold_one_positive_number() {
        assert_eq!(parse_pid("1234\n"), Some(1234));
        assert_eq!(parse_pid(" 7 "), Some(7));
        assert_eq!(parse_pid("0"), None);
        assert_eq!(parse_pid("-3"), None);
        assert_eq!(parse_pid("dionfs"), None);
        assert_eq!(parse_pid(""), None);
    }

    #[test]
    fn refuses_a_process_that_is_not_a_server() {
        // This test process is not `dionfs serve`: it must not be sent
        // SIGHUP (the default action would end it).
        let me = std::process::id() as i32;
        let e = run(Target::Pid(me)).unwrap_err();
        assert!(e.contains("not a `dionfs serve`"), "{e}");
        let e = run(Target::Pid(i32::MAX)).unwrap_err();
        assert!(e.contains("no process"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.pid");
        std::fs::write(&file, "not a pid\n").unwrap();
        let e = run(Target::PidFile(file.clone())).unwrap_err();
        assert!(e.contains("not a process id") && e.contains("x.pid"), "{e}");
        let e = run(Target::PidFile(dir.path().join("missing.pid"))).unwrap_err();
        assert!(e.contains("cannot read pid file"), "{e}");
    }
}
