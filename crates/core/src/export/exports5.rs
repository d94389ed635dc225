//! The /etc/exports vocabulary (exports(5)) for administrators coming from
//! the kernel's NFS server: an export's `options = "rw,sync,..."` in the
//! config, `dionfs exportfs -v` (each export in those words) and
//! `dionfs exportfs --convert /etc/exports` (a config from that file).
//!
//! Options that change nothing here are accepted with a note saying why
//! (`no_subtree_check`, `wdelay`, ...); options dionfs cannot honour are
//! errors that name them, never silently dropped.

use std::fmt::Write as _;

use super::config::{Access, ClientOptions, Durability, ExportConfig, Squash, Xprtsec};

/// exports(5) defaults, where they differ from `dionfs serve DIR`'s: an
/// export given as exports(5) options is read-only unless it says `rw`.
/// (`sync`, the other default, is already the export's.)
pub fn exports5_defaults(o: &mut ClientOptions) {
    o.access = Access::Ro;
    o.squash = Squash::RootSquash;
    o.secure = true;
}

/// Applies comma-separated exports(5) options: those about the data and
/// the export's identity (`sync`, `async`, `fsid`) to `x`, those about
/// the clients to `o`. Returns notes on options accepted without effect,
/// for the log; an option dionfs cannot honour, or an unknown one, is an
/// error naming it.
pub fn apply_options(
    x: &mut ExportConfig,
    o: &mut ClientOptions,
    options: &str,
) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    // knfsd keeps root_squash and all_squash as two flags, each set and
    // cleared by its own words (nfs-utils' parseopts), and squashes
    // everyone while all_squash is set whatever root_squash says (the
    // kernel's nfsd_setuser tests it first): `all_squash,no_root_squash`
    // squashes everyone in either order, as configs copied from
    // /etc/exports expect. An export that is all_squash already counts as
    // root_squash too, knfsd's default.
    let mut all_squash = o.squash == Squash::AllSquash;
    let mut root_squash = o.squash != Squash::NoRootSquash;
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
            ("rw", None) => o.access = Access::Rw,
            ("ro", None) => o.access = Access::Ro,
            ("sync", None) => x.durability = Durability::Sync,
            ("async", None) => x.durability = Durability::Async,
            ("secure", None) => o.secure = true,
            ("insecure", None) => o.secure = false,
            ("root_squash", None) => root_squash = true,
            ("no_root_squash", None) => root_squash = false,
            ("all_squash", None) => all_squash = true,
            ("no_all_squash", None) => all_squash = false,
            ("anonuid", Some(_)) => o.anonuid = number("anonuid")?,
            ("anongid", Some(_)) => o.anongid = number("anongid")?,
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
            // knfsd's auth_nlm (the default) checks an NLM lock's caller
            // like an NFS call's (nfsd_permission with NFSD_MAY_LOCK);
            // no_auth_nlm skips the check for clients that send no
            // credentials with their locks. dionfs always checks
            // (`open_checked` in nlm/locking.rs): relaxing it is not offered,
            // since any client could then lock any file of the export.
            ("secure_locks" | "auth_nlm", None) => notes.push(format!(
                "{key}: what dionfs does anyway: each NLM lock is checked against the \
                 caller's access to the file (read for a shared lock, write for an \
                 exclusive one, or owning it), as knfsd checks with auth_nlm"
            )),
            ("insecure_locks" | "no_auth_nlm", None) => notes.push(format!(
                "{key}: not honoured; dionfs checks each NLM lock against the caller's \
                 access to the file (read for a shared lock, write for an exclusive \
                 one, or owning it), as knfsd does with auth_nlm, its default: a client \
                 that sends no credentials with its locks can lock only files anyone \
                 may read (or write, for an exclusive lock)"
            )),
            ("no_acl" | "acl", None) => notes.push(format!(
                "{key}: no effect; POSIX ACLs apply on the server as the filesystem keeps them"
            )),
            // knfsd's `xprtsec=tls:mtls` (nfs-utils 2.6.3): as the
            // config's `xprtsec = ["tls", "mtls"]`.
            ("xprtsec", Some(v)) => {
                o.xprtsec = Xprtsec::parse(v.split(':')).map_err(|r| format!("`{opt}`: {r}"))?
            }
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
    o.squash = match (all_squash, root_squash) {
        (true, _) => Squash::AllSquash,
        (false, true) => Squash::RootSquash,
        (false, false) => Squash::NoRootSquash,
    };
    Ok(notes)
}

/// The options the client entry `c` of `x` gives, in exports(5) words,
/// as `exportfs -v` prints them.
pub fn options_of(x: &ExportConfig, c: &ClientOptions) -> String {
    let mut o = vec![
        if c.read_only() { "ro" } else { "rw" }.to_string(),
        match x.durability {
            Durability::Sync => "sync",
            Durability::Async => "async",
        }
        .to_string(),
        if c.secure { "secure" } else { "insecure" }.to_string(),
        match c.squash {
            Squash::RootSquash => "root_squash",
            Squash::NoRootSquash => "no_root_squash",
            Squash::AllSquash => "all_squash",
        }
        .to_string(),
        "no_subtree_check".to_string(),
        format!("fsid={}", x.id),
        format!("anonuid={}", c.anonuid),
        format!("anongid={}", c.anongid),
    ];
    if c.xprtsec != Xprtsec::ALL {
        o.push(format!("xprtsec={}", c.xprtsec));
    }
    o.push("sec=sys".to_string());
    o.join(",")
}

/// `exportfs -v` for a configuration: one line per export and client,
/// each with the options of its entry, then the export's data options in
/// the config's words.
pub fn listing(exports: &[ExportConfig]) -> String {
    let mut out = String::new();
    for x in exports {
        for entry in &x.entries {
            let options = options_of(x, &entry.options);
            for c in &entry.clients {
                let _ = writeln!(out, "{:<24}\t{}({})", x.path.display(), c, options);
            }
        }
        let _ = writeln!(
            out,
            "{:<24}\t# dionfs: read_mode = \"{}\" write_mode = \"{}\" integrity = \"{}\" \
             max_transfer = {}",
            "", x.read_mode, x.write_mode, x.integrity, x.max_transfer
        );
    }
    out
}

/// A dionfs config (TOML) for an /etc/exports text: one `[[export]]` per
/// path. A path whose clients all get the same options has them as its
/// `clients` and `options = "..."` (exports(5) semantics: read-only
/// unless `rw`); one whose clients get different options has an
/// `[[export.client]]` entry per option set, each with its `match` and
/// its `options`, as the line gives them (dionfs picks among them as
/// rpc.mountd does, see [`ExportConfig::options_for`]). The text is read
/// as exportfs reads it (see [`entries`]), and a client's options start
/// from its line's `-options`, as in nfs-utils. Errors name the line:
/// clients dionfs cannot match (netgroups), clients of one path that
/// differ in what dionfs keeps per path (`sync`/`async`, `fsid`), option
/// lists exportfs refuses or only warns about (see [`client_word`]).
pub fn convert(text: &str) -> Result<String, String> {
    let mut exports: Vec<Converted> = Vec::new();
    for (n, words) in entries(text)? {
        let at_line = |e: String| format!("line {n}: {e}");
        let mut words = words.into_iter();
        let Some(path) = words.next() else { continue };
        // "-opts": default options for the clients after it on the line,
        // each over those before (nfs-utils parses them into one default
        // entry that each client's own options then change).
        let mut defaults = String::new();
        let mut clients: Vec<(Vec<String>, String)> = Vec::new();
        for w in words {
            if let Some(o) = w.strip_prefix('-') {
                defaults = joined(&defaults, o);
                continue;
            }
            let (client, own) = client_word(&w).map_err(at_line)?;
            let matches = match client {
                "*" => everyone(),
                c => match c.parse::<super::ClientMatch>() {
                    Ok(_) => vec![c.to_string()],
                    Err(e) => return Err(at_line(format!("client {e}"))),
                },
            };
            clients.push((matches, joined(&defaults, own.unwrap_or(""))));
        }
        if clients.is_empty() {
            // exports(5): a path alone is exported to everyone.
            clients.push((everyone(), defaults));
        }
        for (matches, options) in clients {
            let mut path_level = ExportConfig::with_defaults(path.clone().into());
            let mut effective = ClientOptions::DEFAULT;
            exports5_defaults(&mut effective);
            apply_options(&mut path_level, &mut effective, &options).map_err(at_line)?;
            let entry = ConvertedEntry {
                clients: matches,
                options,
                effective,
            };
            // A path on several lines is one export, as exportfs merges
            // them.
            let Some(x) = exports.iter_mut().find(|x| x.path == path) else {
                exports.push(Converted {
                    path: path.clone(),
                    path_level,
                    entries: vec![entry],
                });
                continue;
            };
            for (what, differs) in [
                (
                    "sync/async",
                    x.path_level.durability != path_level.durability,
                ),
                ("fsid", x.path_level.id != path_level.id),
            ] {
                if differs {
                    return Err(at_line(format!(
                        "{path} gives its clients different {what}; dionfs keeps it per \
                         path, the same for all clients"
                    )));
                }
            }
            // Clients one after the other with the same options share an
            // entry (only neighbours: which entry wins for a client that
            // two match stays as written).
            match x.entries.last_mut() {
                Some(last) if last.effective == entry.effective => {
                    last.clients.extend(entry.clients)
                }
                _ => x.entries.push(entry),
            }
        }
    }
    let mut out = format!(
        "# Converted from /etc/exports by `dionfs exportfs --convert`.\n\
         [server]\nstate_dir = \"/var/lib/dionfs\"\n\
         # Counters for `dionfs stats`, which reads this address by default.\n\
         metrics_listen = \"{}\"\n",
        crate::export::STATS_ADDRESS
    );
    for x in exports {
        let list = |clients: &[String]| -> String {
            let quoted: Vec<String> = clients.iter().map(|c| toml_string(c)).collect();
            quoted.join(", ")
        };
        let _ = write!(out, "\n[[export]]\npath = {}\n", toml_string(&x.path));
        if let [only] = x.entries.as_slice() {
            let _ = write!(
                out,
                "clients = [{}]\noptions = {}\n",
                list(&only.clients),
                toml_string(&only.options)
            );
            continue;
        }
        // The options of each entry say the path's again; the export
        // must say them first for the entries to agree with it.
        if x.path_level.durability == Durability::Async {
            out.push_str("durability = \"async\"\n");
        }
        if x.path_level.id != super::config::export_id_for(std::path::Path::new(&x.path)) {
            let _ = writeln!(out, "id = {}", x.path_level.id);
        }
        for e in &x.entries {
            let _ = write!(
                out,
                "\n[[export.client]]\nmatch = [{}]\noptions = {}\n",
                list(&e.clients),
                toml_string(&e.options)
            );
        }
    }
    Ok(out)
}

/// One export of a converted file: its path, what its options say about
/// the path (the same for all its clients), its client entries.
struct Converted {
    path: String,
    path_level: ExportConfig,
    entries: Vec<ConvertedEntry>,
}

/// One client entry of a converted export: its clients, the options of
/// the first of them as written, and what those come to for them.
struct ConvertedEntry {
    clients: Vec<String>,
    options: String,
    effective: ClientOptions,
}

/// The client list exports(5) means by `*` or no client at all.
fn everyone() -> Vec<String> {
    vec!["0.0.0.0/0".into(), "::/0".into()]
}

/// Two comma-separated option lists as one, `b` over `a`.
fn joined(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (_, true) => a.to_string(),
        (true, false) => b.to_string(),
        (false, false) => format!("{a},{b}"),
    }
}

/// `s` as a TOML string.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A client word of an exports line: `client(options)`, or a client alone
/// (`None`: the line's default options). The option list must close at
/// the end of its word, as exportfs requires ("bad option list"; a blank
/// inside it splits the word). It must follow a client: exports(5) gives
/// an option list after a blank, `/srv (rw)`, to every host, and exportfs
/// only warns, but it is nearly always `client (rw)` mistyped for
/// `client(rw)`, which leaves that client read-only and every host
/// read-write; a config served from a piped conversion would never show
/// the warning, so it is refused, saying how to write every host.
fn client_word(w: &str) -> Result<(&str, Option<&str>), String> {
    let Some((client, rest)) = w.split_once('(') else {
        return Ok((w, None));
    };
    let options = rest
        .strip_suffix(')')
        .filter(|o| !o.contains(['(', ')']))
        .ok_or_else(|| {
            format!("`{w}`: a bad option list; write client(option,option) without blanks")
        })?;
    if client.is_empty() {
        return Err(format!(
            "`{w}` follows a blank, so exports(5) gives it to every host, not to the \
             client before it; write `*{w}` if every host is meant, else remove the blank"
        ));
    }
    Ok((client, Some(options)))
}

/// The entries of an exports file as nfs-utils' exportfs reads them
/// (`xgettok`, `xskip`): words separated by blanks; `\` at the end of a
/// line continues it; `#` at the start of a word begins a comment to the
/// end of the line (inside a word it is part of it: `/srv/a#1` is a
/// path); double quotes anywhere in a word keep its blanks; `\ooo` is the
/// byte of that octal number (exportfs writes a blank in a path as
/// `\040`). Each entry's words, with the number of its first line.
fn entries(text: &str) -> Result<Vec<(usize, Vec<String>)>, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut words = Vec::new();
    let (mut line, mut first_line) = (1, 1);
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'\\' if bytes.get(i + 1) == Some(&b'\n') => {
                line += 1;
                i += 2;
            }
            b'\n' => {
                if !words.is_empty() {
                    out.push((first_line, std::mem::take(&mut words)));
                }
                line += 1;
                i += 1;
            }
            b'#' => {
                while bytes.get(i).is_some_and(|&b| b != b'\n') {
                    i += 1;
                }
            }
            b if b.is_ascii_whitespace() => i += 1,
            _ => {
                if words.is_empty() {
                    first_line = line;
                }
                let (word, end) = word_at(bytes, i).map_err(|e| format!("line {line}: {e}"))?;
                words.push(word);
                i = end;
            }
        }
    }
    if !words.is_empty() {
        out.push((first_line, words));
    }
    Ok(out)
}

/// The word starting at `bytes[start]`, decoded, and where it ends.
fn word_at(bytes: &[u8], start: usize) -> Result<(String, usize), String> {
    let mut word = Vec::new();
    let mut quoted = false;
    let mut i = start;
    while let Some(&b) = bytes.get(i) {
        let continued = b == b'\\' && bytes.get(i + 1) == Some(&b'\n');
        if b == b'\n' || continued || (!quoted && b.is_ascii_whitespace()) {
            break;
        }
        if b == b'"' {
            quoted = !quoted;
            i += 1;
        } else if let Some(byte) = octal_escape(&bytes[i..]) {
            word.push(byte);
            i += 4;
        } else {
            word.push(b);
            i += 1;
        }
    }
    let raw = String::from_utf8_lossy(&bytes[start..i]);
    if quoted {
        return Err(format!("`{raw}`: a double quote is not closed on its line"));
    }
    let word = String::from_utf8(word)
        .map_err(|_| format!("`{raw}` is not UTF-8 once its octal escapes are decoded"))?;
    Ok((word, i))
}

/// The byte a `\ooo` escape at the start of `s` stands for (nfs-utils
/// decodes those below `\400`).
fn octal_escape(s: &[u8]) -> Option<u8> {
    let [b'\\', digits @ ..] = s.get(..4)? else {
        return None;
    };
    let n = digits.iter().try_fold(0u32, |n, &d| {
        (b'0'..=b'7')
            .contains(&d)
            .then(|| n * 8 + u32::from(d - b'0'))
    })?;
    u8::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An export and the options of its clients, with exports(5)'s
    /// defaults.
    struct Export {
        x: ExportConfig,
        o: ClientOptions,
    }

    fn export() -> Export {
        let mut o = ClientOptions::DEFAULT;
        exports5_defaults(&mut o);
        Export {
            x: ExportConfig::with_defaults("/srv/a".into()),
            o,
        }
    }

    impl Export {
        fn apply(&mut self, options: &str) -> Result<Vec<String>, String> {
            apply_options(&mut self.x, &mut self.o, options)
        }

        fn printed(&self) -> String {
            options_of(&self.x, &self.o)
        }
    }

    #[test]
    fn options_apply_and_print_back() {
        let mut e = export();
        let notes = e.apply(
            "rw,async,insecure,no_root_squash,anonuid=1000,anongid=100,fsid=77,subtree_check,no_wdelay",
        )
        .unwrap();
        assert_eq!(e.o.access, Access::Rw);
        assert_eq!(e.x.durability, Durability::Async);
        assert!(!e.o.secure);
        assert_eq!(e.o.squash, Squash::NoRootSquash);
        assert_eq!((e.o.anonuid, e.o.anongid, e.x.id), (1000, 100, 77));
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("subtree_check: not needed"));
        let printed = e.printed();
        assert_eq!(
            printed,
            "rw,async,insecure,no_root_squash,no_subtree_check,fsid=77,anonuid=1000,anongid=100,sec=sys"
        );
        // What it prints reads back the same.
        let mut y = export();
        y.apply(&printed).unwrap();
        assert_eq!(y.printed(), printed);
        // exports(5) defaults: read-only, sync, secure, root_squash.
        assert!(export().printed().starts_with("ro,sync,secure,root_squash"));
    }

    #[test]
    fn all_squash_wins_over_root_squash_in_any_order() {
        let squash_of = |options: &str| {
            let mut e = export();
            e.apply(options).unwrap();
            e.o.squash
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
        let mut e = export();
        e.apply("rw,all_squash,no_root_squash,anonuid=1000")
            .unwrap();
        assert!(e.printed().contains(",all_squash,"), "{}", e.printed());
    }

    #[test]
    fn the_nlm_options_notes_say_how_locks_are_checked() {
        // dionfs serves NLM, and checks each lock's caller as knfsd does
        // with auth_nlm (its default).
        for key in ["secure_locks", "auth_nlm", "insecure_locks", "no_auth_nlm"] {
            let notes = export().apply(key).unwrap();
            assert_eq!(notes.len(), 1, "{key}: {notes:?}");
            let note = &notes[0];
            assert!(note.starts_with(&format!("{key}: ")), "{note}");
            assert!(!note.contains("no NLM"), "{note}");
            assert!(
                note.contains("auth_nlm") && note.contains("access"),
                "{note}"
            );
        }
        let notes = export().apply("insecure_locks").unwrap();
        assert!(notes[0].contains("not honoured"), "{notes:?}");
    }

    #[test]
    fn a_converted_config_serves_the_metrics_dionfs_stats_reads() {
        let toml = convert("/srv/a 10.0.0.1(rw)\n").unwrap();
        let table: toml::Table = toml.parse().unwrap();
        assert_eq!(
            table["server"]["metrics_listen"].as_str(),
            Some(crate::export::STATS_ADDRESS)
        );
        assert_eq!(crate::export::STATS_ADDRESS, "127.0.0.1:9049");
    }

    #[test]
    fn the_readmes_conversion_example_is_what_convert_prints() {
        // README.md, "Switching from nfs-kernel-server": an /etc/exports
        // in one code block, "becomes", the config in the next.
        let readme = include_str!("../../../../README.md");
        let section = readme
            .split_once("For example, this /etc/exports\n")
            .expect("the README's conversion example")
            .1;
        let block = |text: &str| -> (String, usize) {
            let start = text.find("```").unwrap();
            let body = text[start..].split_once('\n').unwrap().1;
            let end = body.find("```").unwrap();
            (body[..end].to_string(), text.len() - body.len() + end + 3)
        };
        let (exports, used) = block(section);
        let (config, _) = block(&section[used..]);
        assert_eq!(convert(&exports).unwrap(), config);
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
            let e = export().apply(bad).unwrap_err();
            assert!(e.contains(bad.split('=').next().unwrap()), "{bad}: {e}");
        }
    }

    #[test]
    fn a_clients_options_start_from_the_lines_defaults() {
        // nfs-utils starts each client from the line's `-options` and
        // applies the client's own over them.
        let toml = convert("/srv/a -rw,no_root_squash,insecure 10.0.0.0/8(sync)\n").unwrap();
        assert!(
            toml.contains(
                "clients = [\"10.0.0.0/8\"]\noptions = \"rw,no_root_squash,insecure,sync\""
            ),
            "{toml}"
        );
        // Each `-options` adds to those before it.
        let toml = convert("/srv/a -no_root_squash -rw 10.0.0.1\n").unwrap();
        assert!(toml.contains("options = \"no_root_squash,rw\""), "{toml}");
        // Clients whose options come to the same share one export.
        let toml = convert("/srv/a -rw 10.0.0.1 10.0.0.2(rw) 10.0.0.3(sync,rw)\n").unwrap();
        assert!(
            toml.contains("clients = [\"10.0.0.1\", \"10.0.0.2\", \"10.0.0.3\"]\noptions = \"rw\""),
            "{toml}"
        );
        // exports(5)'s example: `@external(ro)` is sync,ro beside sync,rw:
        // one entry per option set.
        let toml = convert("/srv/www -sync,rw server 10.0.0.0/8(ro)\n").unwrap();
        assert!(
            toml.ends_with(
                "path = \"/srv/www\"\n\n\
                 [[export.client]]\nmatch = [\"server\"]\noptions = \"sync,rw\"\n\n\
                 [[export.client]]\nmatch = [\"10.0.0.0/8\"]\noptions = \"sync,rw,ro\"\n"
            ),
            "{toml}"
        );
        // A path on two lines is one export, as exportfs merges them.
        let toml = convert("/srv/a 10.0.0.1(rw)\n/srv/a 10.0.0.2(rw)\n").unwrap();
        assert_eq!(toml.matches("[[export]]").count(), 1, "{toml}");
        assert!(
            toml.contains("clients = [\"10.0.0.1\", \"10.0.0.2\"]"),
            "{toml}"
        );
        let toml = convert("/srv/a 10.0.0.1(rw)\n/srv/a 10.0.0.2(ro)\n").unwrap();
        assert_eq!(toml.matches("[[export]]").count(), 1, "{toml}");
        assert_eq!(toml.matches("[[export.client]]").count(), 2, "{toml}");
        // What dionfs keeps per path must be the same for every client.
        let e = convert("/srv/a 10.0.0.1(rw)\n/srv/a 10.0.0.2(ro,async)\n").unwrap_err();
        assert!(e.starts_with("line 2:") && e.contains("sync/async"), "{e}");
        let e = convert("/srv/a 10.0.0.1(rw,fsid=7) 10.0.0.2(ro,fsid=8)\n").unwrap_err();
        assert!(e.starts_with("line 1:") && e.contains("fsid"), "{e}");
    }

    #[test]
    fn options_after_a_blank_are_refused_not_given_to_everyone() {
        // exports(5) gives `(rw)` alone to every host; after a client it is
        // the classic typo for `client(rw)`, which leaves the client
        // read-only and every host read-write.
        for (text, suggestion) in [
            ("/srv/a (rw)\n", "*(rw)"),
            ("/srv/a 10.0.0.1 (rw)\n", "*(rw)"),
            ("/srv/a\t(rw,no_root_squash)\n", "*(rw,no_root_squash)"),
        ] {
            let e = convert(text).unwrap_err();
            assert!(
                e.starts_with("line 1:") && e.contains(suggestion),
                "{text:?}: {e}"
            );
        }
        // Every host, said as exports(5) says it, is converted.
        let toml = convert("/srv/a *(rw)\n").unwrap();
        assert!(
            toml.contains("clients = [\"0.0.0.0/0\", \"::/0\"]\noptions = \"rw\""),
            "{toml}"
        );
        // An option list must close, once, at the end of its word.
        for bad in [
            "10.0.0.1(rw",
            "10.0.0.1(rw))",
            "10.0.0.1(rw)x",
            "10.0.0.1(rw,(ro)",
        ] {
            let e = convert(&format!("/srv/a {bad}\n")).unwrap_err();
            assert!(e.starts_with("line 1:") && e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn words_are_read_as_exportfs_reads_them() {
        // `\ooo` octal escapes (what exportfs writes for a blank), double
        // quotes anywhere in a word, and `#` beginning a comment only at
        // the start of a word.
        let toml = convert(
            "/srv/with\\040space 10.0.0.1(rw)\n\
             /srv/caf\\303\\251 10.0.0.1(rw)\n\
             /srv/\"two words\"/x 10.0.0.1(rw)\n\
             /srv/a#1 10.0.0.1(rw) # a comment\n\
             # /srv/commented 10.0.0.1(rw)\n",
        )
        .unwrap();
        for path in [
            "/srv/with space",
            "/srv/café",
            "/srv/two words/x",
            "/srv/a#1",
        ] {
            assert!(
                toml.contains(&format!(
                    "path = \"{path}\"\nclients = [\"10.0.0.1\"]\noptions = \"rw\"\n"
                )),
                "{path}: {toml}"
            );
        }
        assert!(!toml.contains("commented"), "{toml}");
        // Whatever a path decodes to is written as a TOML string.
        let toml = convert("/srv/\\042q\\042\\011\\134 10.0.0.1(rw)\n").unwrap();
        let table: toml::Table = toml.parse().unwrap();
        assert_eq!(table["export"][0]["path"].as_str(), Some("/srv/\"q\"\t\\"));
        let e = convert("/srv/ok 10.0.0.1(rw)\n/srv/\\377 10.0.0.1(rw)\n").unwrap_err();
        assert!(e.starts_with("line 2:") && e.contains("UTF-8"), "{e}");
        let e = convert("\"/srv/a 10.0.0.1(rw)\n").unwrap_err();
        assert!(e.starts_with("line 1:") && e.contains("quote"), "{e}");
    }

    /// `text` converted, with its paths replaced by `dir`, read as a
    /// config.
    fn converted_config(text: &str, dir: &std::path::Path) -> super::super::Config {
        let toml = convert(text).unwrap();
        let toml = toml.replace("\"/srv/a\"", &toml_string(&dir.display().to_string()));
        super::super::Config::from_toml(std::path::Path::new("x"), &toml)
            .unwrap_or_else(|e| panic!("{e}\n{toml}"))
    }

    #[test]
    fn one_path_with_options_per_client_converts_as_it_is() {
        // The most common line of all: one host may write as root,
        // everyone else reads.
        let text = "/srv/a host1(rw,no_root_squash) *(ro)\n";
        let toml = convert(text).unwrap();
        assert!(
            toml.ends_with(
                "\n[[export]]\npath = \"/srv/a\"\n\n\
                 [[export.client]]\nmatch = [\"host1\"]\noptions = \"rw,no_root_squash\"\n\n\
                 [[export.client]]\nmatch = [\"0.0.0.0/0\", \"::/0\"]\noptions = \"ro\"\n"
            ),
            "{toml}"
        );
        // And it serves what the line says: host1 (by name) writes as
        // root, others read, squashed.
        let dir = tempfile::tempdir().unwrap();
        let c = converted_config(text, dir.path());
        let x = &c.exports[0];
        let ip = "10.0.0.9".parse().unwrap();
        let names = ["host1".to_string()];
        let host1 = x
            .options_for(crate::export::Client {
                ip,
                names: &names,
                certificate: None,
            })
            .unwrap();
        assert_eq!(
            (host1.access, host1.squash),
            (Access::Rw, Squash::NoRootSquash)
        );
        let other = x.options_for(crate::export::Client::at(ip)).unwrap();
        assert_eq!(
            (other.access, other.squash),
            (Access::Ro, Squash::RootSquash)
        );

        // Addresses, a network and everyone, with `async` and `fsid`
        // given alike to all (kept per path) and the line's `-options`.
        let text = "/srv/a -async,fsid=12 10.0.0.0/8(rw) 10.1.2.3(rw,no_root_squash,insecure) \
                    *(ro,all_squash,anonuid=1000)\n";
        let toml = convert(text).unwrap();
        assert!(toml.contains("durability = \"async\"\nid = 12\n"), "{toml}");
        let c = converted_config(text, dir.path());
        let x = &c.exports[0];
        assert_eq!((x.durability, x.id), (Durability::Async, 12));
        let of = |a: &str| {
            *x.options_for(crate::export::Client::at(a.parse().unwrap()))
                .unwrap()
        };
        let host = of("10.1.2.3");
        assert_eq!(
            (host.access, host.squash, host.secure),
            (Access::Rw, Squash::NoRootSquash, false)
        );
        let net = of("10.9.9.9");
        assert_eq!((net.access, net.squash), (Access::Rw, Squash::RootSquash));
        let anyone = of("192.168.1.1");
        assert_eq!(
            (anyone.access, anyone.squash, anyone.anonuid),
            (Access::Ro, Squash::AllSquash, 1000)
        );
        // The listing shows each entry's options.
        let listing = listing(&c.exports);
        assert!(
            listing.contains("10.1.2.3/32(rw,async,insecure,no_root_squash,"),
            "{listing}"
        );
        assert!(
            listing.contains("0.0.0.0/0(ro,async,secure,all_squash,"),
            "{listing}"
        );
        assert!(
            listing.contains("read_mode = \"direct\" write_mode = \"direct\""),
            "{listing}"
        );
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
        let e = convert("/srv/a 10.0.0.1(rw,crossmnt)\n").unwrap_err();
        assert!(e.contains("crossmnt"), "{e}");
    }
}
