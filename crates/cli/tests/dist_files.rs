//! The files under dist/ that the Debian package ships and that are made
//! from something else cannot drift from it: the man pages and shell
//! completions from the clap definitions (`dionfs dist-files dist`
//! refreshes them), the package's unit from dist/dionfs.service.

use std::path::{Path, PathBuf};
use std::process::Command;

fn dist() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The files directly in `dir`, by name.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn generated_files_match_the_cli() {
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_dionfs"))
        .arg("dist-files")
        .arg(out.path())
        .status()
        .unwrap();
    assert!(status.success(), "dionfs dist-files: {status}");
    let stale = "dist/ is stale: run `cargo run -p dionfs -- dist-files dist` and commit it";
    for sub in ["man", "completions"] {
        let made = out.path().join(sub);
        let kept = dist().join(sub);
        let made_names = names(&made);
        // dist/man also holds the hand-written dionfs.toml.5.
        let kept_names: Vec<String> = names(&kept)
            .into_iter()
            .filter(|n| n != "dionfs.toml.5")
            .collect();
        assert_eq!(made_names, kept_names, "{stale}");
        for name in &made_names {
            assert!(
                read(&made.join(name)) == read(&kept.join(name)),
                "{sub}/{name}: {stale}"
            );
        }
    }
    assert!(names(&out.path().join("man")).contains(&"dionfs-serve.8".to_string()));
}

#[test]
fn hand_written_page_names_this_version() {
    let page = read(&dist().join("man/dionfs.toml.5"));
    let version = format!("\"dionfs {}\"", env!("CARGO_PKG_VERSION"));
    let th = page.lines().find(|l| l.starts_with(".TH ")).unwrap();
    assert!(th.contains(&version), "dionfs.toml.5: {th}: not {version}");
}

/// Everything after the leading comment.
fn unit_body(text: &str) -> &str {
    &text[text.find("[Unit]").unwrap()..]
}

#[test]
fn package_unit_is_the_shipped_unit_with_package_paths() {
    let manual = read(&dist().join("dionfs.service"));
    let package = read(&dist().join("debian/dionfs.service"));
    let expected = unit_body(&manual)
        .replace("/usr/local/bin/dionfs", "/usr/sbin/dionfs")
        .replace(
            "Documentation=https://",
            "Documentation=man:dionfs(8) man:dionfs.toml(5) https://",
        );
    assert!(
        unit_body(&package) == expected,
        "dist/debian/dionfs.service differs from dist/dionfs.service beyond its paths"
    );
}
