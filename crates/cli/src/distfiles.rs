//! The files the Debian package ships that are made from the CLI's clap
//! definitions: a man page per command and shell completions. They are
//! written by `dionfs dist-files DIR` into `dist/` and committed, so that
//! a plain `cargo deb` finds them; a test (`crates/cli/tests/dist_files.rs`)
//! fails when the committed files no longer match the definitions.
//!
//! `dist-files` is no subcommand of the CLI: a hidden one would still be
//! offered by the completions it writes. `main` looks for it before clap.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap_complete::Shell;

/// The man pages' section: dionfs is an administrator's command.
const SECTION: &str = "8";

/// The first argument that selects this instead of the CLI.
pub const COMMAND: &str = "dist-files";

/// `dionfs dist-files DIR`: refresh the package's copies with `dionfs
/// dist-files dist`.
pub fn main(cmd: clap::Command, args: &[OsString]) -> ExitCode {
    let [dir] = args else {
        eprintln!("usage: dionfs {COMMAND} DIR");
        return ExitCode::from(2);
    };
    let dir = PathBuf::from(dir);
    match write(cmd, &dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dionfs {COMMAND}: {}: {e}", dir.display());
            ExitCode::FAILURE
        }
    }
}

/// Write `man/dionfs.8`, `man/dionfs-SUBCOMMAND.8` for each visible
/// subcommand, and `completions/{dionfs.bash,_dionfs,dionfs.fish}` under
/// `dir`.
fn write(mut cmd: clap::Command, dir: &Path) -> std::io::Result<()> {
    // Propagates global flags (--log-level) and versions to subcommands.
    cmd.build();
    let man = dir.join("man");
    let completions = dir.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;

    let name = cmd.get_name().to_string();
    write_page(&man, &name, cmd.clone())?;
    // clap's own `help` subcommand gets no page: `dionfs(8)` covers it.
    let pages = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help");
    for sub in pages {
        let full = format!("{name}-{}", sub.get_name());
        // The page's NAME line and title say `dionfs-serve`, its synopsis
        // `dionfs serve`.
        let sub = sub
            .clone()
            .name(full.clone())
            .bin_name(format!("{name} {}", sub.get_name()));
        write_page(&man, &full, sub)?;
    }

    for (shell, file) in [
        (Shell::Bash, "dionfs.bash"),
        (Shell::Zsh, "_dionfs"),
        (Shell::Fish, "dionfs.fish"),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut cmd, &name, &mut out);
        std::fs::write(completions.join(file), out)?;
    }
    Ok(())
}

fn write_page(man: &Path, name: &str, cmd: clap::Command) -> std::io::Result<()> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .section(SECTION)
        .manual("System Administration")
        .source(format!("dionfs {}", env!("CARGO_PKG_VERSION")))
        .render(&mut out)?;
    std::fs::write(man.join(format!("{name}.{SECTION}")), out)
}
