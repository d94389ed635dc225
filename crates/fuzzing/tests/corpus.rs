//! Replays the fuzz corpus as ordinary tests: every file of
//! `fuzz/corpus/TARGET/` and `fuzz/regressions/TARGET/` through the
//! target's function, on stable, without libFuzzer. Also keeps the corpus
//! and the targets honest: every target has a non-empty corpus and a
//! cargo-fuzz target file, and the committed seeds are what
//! `dionfs_fuzzing::seeds` makes.
//!
//! After changing a seed or an encoding, rewrite the seeds with
//! `cargo test -p dionfs-fuzzing --test corpus -- --ignored write_seeds`.

use std::collections::BTreeSet;
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use dionfs_fuzzing::{seeds, Target, TARGETS};

/// Prefix of the files the seed generator owns in a corpus directory.
const SEED_PREFIX: &str = "seed-";

fn fuzz_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    dir.canonicalize()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn corpus_dir(target: &str) -> PathBuf {
    fuzz_dir().join("corpus").join(target)
}

/// The files of `dir`, sorted; none if it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .map(|e| e.expect("read corpus directory").path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .expect("a file")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn every_corpus_and_regression_input_passes() {
    let mut failed = Vec::new();
    for &Target { name: target, run } in TARGETS {
        let corpus = files(&corpus_dir(target));
        assert!(
            !corpus.is_empty(),
            "fuzz/corpus/{target} is missing or empty"
        );
        let regressions = files(&fuzz_dir().join("regressions").join(target));
        for path in corpus.iter().chain(&regressions) {
            let data = fs::read(path).expect("read corpus file");
            if catch_unwind(AssertUnwindSafe(|| run(&data))).is_err() {
                failed.push(path.display().to_string());
            }
        }
    }
    assert!(failed.is_empty(), "inputs that fail: {failed:#?}");
}

#[test]
fn every_target_has_a_cargo_fuzz_target_calling_it() {
    let dir = fuzz_dir().join("fuzz_targets");
    let on_disk: BTreeSet<String> = files(&dir)
        .iter()
        .filter_map(|p| file_name(p).strip_suffix(".rs").map(str::to_owned))
        .collect();
    let listed: BTreeSet<String> = TARGETS.iter().map(|t| t.name.to_owned()).collect();
    assert_eq!(on_disk, listed, "fuzz/fuzz_targets/*.rs and TARGETS differ");
    for name in &listed {
        let source = fs::read_to_string(dir.join(format!("{name}.rs"))).expect("read target");
        assert!(
            source.contains(&format!("dionfs_fuzzing::{name}(")),
            "fuzz/fuzz_targets/{name}.rs does not call dionfs_fuzzing::{name}"
        );
    }
}

#[test]
fn seeds_pass_and_are_committed() {
    let seeds = seeds::all();
    let mut names = BTreeSet::new();
    for seed in &seeds {
        let check = dionfs_fuzzing::target(seed.target).expect("a seed of a known target");
        check(&seed.bytes);
        let file = format!("{SEED_PREFIX}{}", seed.name);
        assert!(
            names.insert((seed.target, file.clone())),
            "two seeds {}/{file}",
            seed.target
        );
        let path = corpus_dir(seed.target).join(&file);
        let committed = fs::read(&path).unwrap_or_default();
        assert!(
            committed == seed.bytes,
            "{} is not the current seed: run the ignored test write_seeds",
            path.display()
        );
    }
    for target in TARGETS.iter().map(|t| t.name) {
        let committed: Vec<String> = files(&corpus_dir(target))
            .iter()
            .map(|p| file_name(p))
            .filter(|n| n.starts_with(SEED_PREFIX))
            .collect();
        assert!(!committed.is_empty(), "target {target} has no seeds");
        for name in committed {
            assert!(
                names.contains(&(target, name.clone())),
                "fuzz/corpus/{target}/{name} is no seed any more: run the ignored test write_seeds"
            );
        }
    }
}

/// Writes the seeds into the corpus, replacing the old ones (other corpus
/// files, which fuzzing found, are kept).
#[test]
#[ignore = "writes fuzz/corpus; run by hand after changing seeds"]
fn write_seeds() {
    for target in TARGETS.iter().map(|t| t.name) {
        let dir = corpus_dir(target);
        fs::create_dir_all(&dir).expect("create corpus directory");
        for path in files(&dir) {
            if file_name(&path).starts_with(SEED_PREFIX) {
                fs::remove_file(path).expect("remove old seed");
            }
        }
    }
    for seed in seeds::all() {
        let path = corpus_dir(seed.target).join(format!("{SEED_PREFIX}{}", seed.name));
        fs::write(path, &seed.bytes).expect("write seed");
    }
}
