//! The /etc/exports vocabulary (exports(5)) for administrators coming from
//! the kernel's NFS server: an export's `options = "rw,sync,..."` in the
//! config, `dionfs exportfs -v` (each export in those words) and
//! `dionfs exportfs --convert /etc/exports` (a config from that file).
//!
//! Options that change nothing here are accepted with a note saying why
//! (`no_subtree_check`, `wdelay`, ...); options dionfs cannot honour are
//! errors that name them, never silently dropped.

use std::fmt::Write as _;

use super::config::{Access, Durability, ExportConfig, Squash};

/// exports(5) defaults, where they differ from `dionfs serve DIR`'s: an
/// export given as exports(5) options is read-only unless it says `rw`.
pub fn exports5_defaults(x: &mut ExportConfig) {
    x.access = Access::Ro;
    x.durability = Durability::Sync;
    x.squash = Squash::RootSquash;
    x.secure = true;
}

/// Applies comma-separated exports(5) options to `x`. Returns notes on
/// options accepted without effect, for the log; an option dionfs cannot
/// honour, or an unknown one, is an error naming it.
pub fn apply_options(x: &mut ExportConfig, options: &str) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    // knfsd keeps root_squash and all_squash as two flags, each set and
    // cleared by its own words (nfs-utils' parseopts), and squashes
    // everyone while all_squash is set whatever root_squash says (the
    // kernel's nfsd_setuser tests it first): `all_squash,no_root_squash`
    // squashes everyone in either order, as configs copied from
    // /etc/exports expect. An export that is all_squash already counts as
    // root_squash too, knfsd's default.
    let mut all_squash = x.squash == Squash::AllSquash;
    let mut root_squash = x.squash != Squash::NoRootSquash;
    for opt in options.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        let number = |what: &str| -> Result<u32, String> {
            value
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("`{opt}`: {what} must be a number"))
        };
        match (key, value) {
            ("rw", None) => x.access = Access::Rw,
            ("ro", None) => x.access = Access::Ro,
            ("sync", None) => x.durability = Durability::Sync,
            ("async", None) => x.durability = Durability::Async,
            ("secure", None) => x.secure = true,
            ("insecure", None) => x.secure = false,
            ("root_squash", None) => root_squash = true,
            ("no_root_squash", None) => root_squash = false,
            ("all_squash", None) => all_squash = true,
            ("no_all_squash", None) => all_squash = false,
            ("anonuid", Some(_)) => x.anonuid = number("anonuid")?,
            ("anongid", Some(_)) => x.anongid = number("anongid")?,
            ("fsid", Some("0" | "root")) => {
                return Err(format!(
                    "`{opt}`: the NFSv4 pseudo-root; dionfs serves NFSv3 only, leave it out"
                ))
            }
            ("fsid", Some(v)) => {
                // A number: the id in this export's file handles (kept
                // across restarts and renumbering); a UUID: one derived
                // from it.
                x.id = match v.parse::<u32>() {
                    Ok(n) => u16::try_from(n).map_err(|_| {
                        format!("`{opt}`: dionfs export ids are 1..=65535; pick a smaller fsid")
                    })?,
                    Err(_) => {
                        let h = blake3::hash(v.as_bytes());
                        u16::from_be_bytes([h.as_bytes()[0], h.as_bytes()[1]])
                    }
                };
            }
            ("subtree_check", None) => notes.push(
                "subtree_check: not needed; dionfs file handles are authenticated and \
                 directories are checked to lie under the export root, without its costs"
                    .to_string(),
            ),
            ("no_subtree_check", None) => {}
            ("wdelay" | "no_wdelay", None) => notes.push(format!(
                "{key}: no effect; dionfs writes each WRITE as it comes (see write_mode)"
            )),
            ("hide" | "nohide" | "crossmnt", None) => {
                return Err(format!(
                    "`{opt}`: dionfs does not cross into filesystems mounted inside an export; \
                     export each filesystem on its own"
                ))
            }
            ("secure_locks" | "insecure_locks" | "auth_nlm" | "no_auth_nlm", None) => notes.push(
                format!("{key}: no effect; dionfs has no NLM lock service yet"),
            ),
            ("no_acl" | "acl", None) => notes.push(format!(
                "{key}: no effect; POSIX ACLs apply on the server as the filesystem keeps them"
            )),
            ("sec", Some("sys")) => {}
            ("sec", Some(other)) => {
                return Err(format!(
                    "`{opt}`: dionfs speaks AUTH_SYS only (sec=sys); `{other}` is not supported"
                ))
            }
            ("mp" | "mountpoint", _) => {
                return Err(format!(
                    "`{opt}`: not supported; export a mount point itself"
                ))
            }
            _ => return Err(format!("`{opt}`: not an exports(5) option dionfs knows")),
        }
    }
    x.squash = match (all_squash, root_squash) {
        (true, _) => Squash::AllSquash,
        (false, true) => Squash::RootSquash,
        (false, false) => Squash::NoRootSquash,
    };
    Ok(notes)
}

/// The options of `x` in exports(5) words, as `exportfs -v` prints them.
pub fn options_of(x: &ExportConfig) -> String {
    let mut o = vec![
        if x.read_only() { "ro" } else { "rw" }.to_string(),
        match x.durability {
            Durability::Sync => "sync",
            Durability::Async => "async",
        }
        .to_string(),
        if x.secure { "secure" } else { "insecure" }.to_string(),
        match x.squash {
            Squash::RootSquash => "root_squash",
            Squash::NoRootSquash => "no_root_squash",
            Squash::AllSquash => "all_squash",
        }
        .to_string(),
        "no_subtree_check".to_string(),
        format!("fsid={}", x.id),
        format!("anonuid={}", x.anonuid),
        format!("anongid={}", x.anongid),
    ];
    o.push("sec=sys".to_string());
    o.join(",")
}

/// `exportfs -v` for a configuration: one line per export and client.
pub fn listing(exports: &[ExportConfig]) -> String {
    let mut out = String::new();
    for x in exports {
        let options = options_of(x);
        for c in &x.clients {
            let _ = writeln!(out, "{:<24}\t{}({})", x.path.display(), c, options);
        }
        let _ = writeln!(
            out,
            "{:<24}\t# dionfs: read_mode={:?} write_mode={:?} integrity={:?} max_transfer={}",
            "", x.read_mode, x.write_mode, x.integrity, x.max_transfer
        );
    }
    out
}

/// A dionfs config (TOML) for an /etc/exports text: one `[[export]]` per
/// path, its clients, its options as `options = "..."` (exports(5)
/// semantics: read-only unless `rw`). Errors name the line: clients
/// dionfs cannot match (netgroups) and one path with different options
/// for different clients.
pub fn convert(text: &str) -> Result<String, String> {
    let mut out = String::from(
        "# Converted from /etc/exports by `dionfs exportfs --convert`.\n\
         [server]\nstate_dir = \"/var/lib/dionfs\"\n",
    );
    for (n, line) in logical_lines(text) {
        let mut words = split_words(&line).into_iter();
        let Some(path) = words.next() else { continue };
        let mut clients = Vec::new();
        let mut options: Option<String> = None;
        let mut default_opts: Option<String> = None;
        for w in words {
            if let Some(o) = w.strip_prefix('-') {
                // "-opts": default options of the line.
                default_opts = Some(o.to_string());
                continue;
            }
            let (client, opts) = match w.split_once('(') {
                Some((c, rest)) => (c.to_string(), rest.trim_end_matches(')').to_string()),
                None => (w.clone(), default_opts.clone().unwrap_or_default()),
            };
            let clients_here: Vec<String> = match client.as_str() {
                "" | "*" => vec!["0.0.0.0/0".into(), "::/0".into()],
                c => match c.parse::<super::ClientMatch>() {
                    Ok(_) => vec![c.to_string()],
                    Err(e) => return Err(format!("line {n}: client {e}")),
                },
            };
            let mut probe = ExportConfig::with_defaults(path.clone().into());
            exports5_defaults(&mut probe);
            apply_options(&mut probe, &opts).map_err(|e| format!("line {n}: {e}"))?;
            match &options {
                Some(o) if *o != opts => {
                    return Err(format!(
                        "line {n}: {path} gives its clients different options; dionfs has \
                         one set per export"
                    ))
                }
                _ => options = Some(opts),
            }
            clients.extend(clients_here);
        }
        if clients.is_empty() {
            // exports(5): a path alone is exported to everyone.
            clients = vec!["0.0.0.0/0".into(), "::/0".into()];
            options = default_opts;
        }
        let quoted: Vec<String> = clients.iter().map(|c| format!("{c:?}")).collect();
        let _ = write!(
            out,
            "\n[[export]]\npath = {path:?}\nclients = [{}]\noptions = {:?}\n",
            quoted.join(", "),
            options.unwrap_or_default()
        );
    }
    Ok(out)
}

/// Lines of an exports file with comments removed and `\` continuations
/// joined, numbered from 1 (the first line of each).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("");
        if current.is_empty() {
            start = i + 1;
        }
        match line.strip_suffix('\\') {
            Some(cont) => {
                current.push_str(cont);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                if !current.trim().is_empty() {
                    out.push((start, current.trim().to_string()));
                }
                current.clear();
            }
        }
    }
    if !current.trim().is_empty() {
        out.push((start, current.trim().to_string()));
    }
    out
}

/// Whitespace-separated words, a double-quoted path kept whole.
fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        if let Some(q) = rest.strip_prefix('"') {
            let end = q.find('"').unwrap_or(q.len());
            words.push(q[..end].to_string());
            rest = q.get(end + 1..).unwrap_or("").trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            words.push(rest[..end].to_string());
            rest = rest[end..].trim_start();
        }
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export() -> ExportConfig {
        let mut x = ExportConfig::with_defaults("/srv/a".into());
        exports5_defaults(&mut x);
        x
    }

    #[test]
    fn options_apply_and_print_back() {
        let mut x = export();
        let notes = apply_options(
            &mut x,
            "rw,async,insecure,no_root_squash,anonuid=1000,anongid=100,fsid=77,subtree_check,no_wdelay",
        )
        .unwrap();
        assert_eq!(x.access, Access::Rw);
        assert_eq!(x.durability, Durability::Async);
        assert!(!x.secure);
        assert_eq!(x.squash, Squash::NoRootSquash);
        assert_eq!((x.anonuid, x.anongid, x.id), (1000, 100, 77));
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("subtree_check: not needed"));
        let printed = options_of(&x);
        assert_eq!(
            printed,
            "rw,async,insecure,no_root_squash,no_subtree_check,fsid=77,anonuid=1000,anongid=100,sec=sys"
        );
        // What it prints reads back the same.
        let mut y = export();
        apply_options(&mut y, &printed).unwrap();
        assert_eq!(options_of(&y), printed);
        // exports(5) defaults: read-only, sync, secure, root_squash.
        assert!(options_of(&export()).starts_with("ro,sync,secure,root_squash"));
    }

    #[test]
    fn all_squash_wins_over_root_squash_in_any_order() {
        let squash_of = |options: &str| {
            let mut x = export();
            apply_options(&mut x, options).unwrap();
            x.squash
        };
        // knfsd's two flags: all_squash, once set, squashes everyone
        // whatever root_squash says (nfsd_setuser tests it first).
        for options in [
            "rw,all_squash,no_root_squash,anonuid=1000",
            "no_root_squash,all_squash",
            "all_squash,root_squash",
            "root_squash,all_squash",
            "no_all_squash,all_squash",
        ] {
            assert_eq!(squash_of(options), Squash::AllSquash, "{options}");
        }
        // A later word for the same flag wins; the other flag keeps its own.
        assert_eq!(squash_of("all_squash,no_all_squash"), Squash::RootSquash);
        assert_eq!(
            squash_of("no_root_squash,all_squash,no_all_squash"),
            Squash::NoRootSquash
        );
        assert_eq!(
            squash_of("all_squash,no_root_squash,no_all_squash"),
            Squash::NoRootSquash
        );
        let mut x = export();
        apply_options(&mut x, "rw,all_squash,no_root_squash,anonuid=1000").unwrap();
        assert!(
            options_of(&x).contains(",all_squash,"),
            "{}",
            options_of(&x)
        );
    }

    #[test]
    fn what_cannot_be_honoured_is_an_error_naming_it() {
        for bad in [
            "fsid=0",
            "crossmnt",
            "sec=krb5p",
            "anonuid=x",
            "fsid=70000",
            "frobnicate",
        ] {
            let e = apply_options(&mut export(), bad).unwrap_err();
            assert!(e.contains(bad.split('=').next().unwrap()), "{bad}: {e}");
        }
    }

    #[test]
    fn an_exports_file_converts_to_a_config() {
        let text = "# comment\n\
                    /srv/projects  10.0.0.0/8(rw,sync,no_subtree_check) 192.168.1.7(rw,sync,no_subtree_check)\n\
                    /srv/public -ro,insecure \\\n    *\n\
                    \"/srv/with space\" 127.0.0.1(rw,no_root_squash)\n";
        let toml = convert(text).unwrap();
        let config = super::super::Config::from_toml(std::path::Path::new("x"), &toml);
        // The paths do not exist here; the text itself is what is checked.
        assert!(toml.contains("path = \"/srv/projects\"\nclients = [\"10.0.0.0/8\", \"192.168.1.7\"]\noptions = \"rw,sync,no_subtree_check\""), "{toml}");
        assert!(toml.contains("path = \"/srv/public\"\nclients = [\"0.0.0.0/0\", \"::/0\"]\noptions = \"ro,insecure\""), "{toml}");
        assert!(toml.contains("path = \"/srv/with space\""), "{toml}");
        assert!(config.is_err(), "paths that do not exist are refused");
        let names = convert("/srv/a build?.example.com(rw) *.lab(rw)\n").unwrap();
        assert!(
            names.contains("clients = [\"build?.example.com\", \"*.lab\"]"),
            "{names}"
        );
        let e = convert("/srv/a @trusted(rw)\n").unwrap_err();
        assert!(e.starts_with("line 1:") && e.contains("netgroups"), "{e}");
        let e = convert("/srv/a 10.0.0.1(rw) 10.0.0.2(ro)\n").unwrap_err();
        assert!(e.contains("different options"), "{e}");
        let e = convert("/srv/a 10.0.0.1(rw,crossmnt)\n").unwrap_err();
        assert!(e.contains("crossmnt"), "{e}");
    }
}
