//! What the operator tools ask a running server, served beside
//! `/metrics`: `/exports` (`dionfs exportfs -v`), `/clients` and
//! `/clients.json` (`dionfs clients`). Each is text made here from the
//! server's state as it is now, so that the tools print what the server
//! applies, not what a file says.

use std::fmt::Write as _;
use std::net::IpAddr;

use dionfs_core::export::{ClientEntry, ClientOptions, ExportConfig};

/// The exports `exports` as `[[export]]` sections of a config, every
/// option written out in the config's words (`read_mode = "direct"`),
/// defaults included: what the server applies. An export with one client
/// entry has its clients and their options in the section itself; one
/// with several has an `[[export.client]]` per entry, in the config's
/// order.
pub fn exports_toml(exports: &[&ExportConfig]) -> String {
    let mut out = String::new();
    for x in exports {
        let _ = write!(
            out,
            "[[export]]\n\
             path = {}\n\
             id = {}\n",
            toml_string(&x.path.to_string_lossy()),
            x.id,
        );
        if let [only] = x.entries.as_slice() {
            let _ = writeln!(out, "clients = [{}]", clients_list(only));
            client_options(&mut out, &only.options);
        }
        let _ = write!(
            out,
            "durability = \"{}\"\n\
             read_mode = \"{}\"\n\
             write_mode = \"{}\"\n\
             integrity = \"{}\"\n\
             max_transfer = {}\n\
             allow_devices = {}\n\n",
            x.durability, x.read_mode, x.write_mode, x.integrity, x.max_transfer, x.allow_devices,
        );
        if x.entries.len() > 1 {
            for entry in &x.entries {
                let _ = write!(
                    out,
                    "[[export.client]]\nmatch = [{}]\n",
                    clients_list(entry)
                );
                client_options(&mut out, &entry.options);
                out.push('\n');
            }
        }
    }
    out
}

/// The clients of `entry` as the items of a TOML list.
fn clients_list(entry: &ClientEntry) -> String {
    let clients: Vec<String> = entry
        .clients
        .iter()
        .map(|c| toml_string(&c.to_string()))
        .collect();
    clients.join(", ")
}

/// The keys of a client entry's options, one a line.
fn client_options(out: &mut String, o: &ClientOptions) {
    let _ = write!(
        out,
        "access = \"{}\"\n\
         squash = \"{}\"\n\
         anonuid = {}\n\
         anongid = {}\n\
         secure = {}\n",
        o.access, o.squash, o.anonuid, o.anongid, o.secure,
    );
}

/// A TOML basic string: `"` and `\` escaped, control characters as
/// `\uXXXX` (a path may hold any byte but `/` and NUL).
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A client of the running server as `dionfs clients` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientLine {
    /// An NLM host holding locks: the name its lock manager gives
    /// (`caller_name`) and the address its calls come from.
    Nlm { name: String, address: IpAddr },
    /// An NFSv4 client record.
    V4 {
        clientid: u64,
        address: IpAddr,
        /// `co_ownerid`, printable bytes as they are, others as `\xNN`.
        owner: String,
        confirmed: bool,
        sessions: usize,
        /// The implementation it named (`eia_client_impl_id`), if any.
        implementation: Option<String>,
        /// The minor version of its EXCHANGE_ID.
        minor: u32,
        /// Whole seconds left of its lease; `None` when it ran out.
        lease_left: Option<u64>,
        /// `active`, `courtesy` (lease run out, state kept) or `expired`
        /// (a courtesy client a conflict expired).
        life: &'static str,
        /// Its open stateids and lock stateids.
        opens: usize,
        locks: usize,
    },
}

/// A lease as `dionfs clients` shows it: the seconds left, or the
/// client's life when it ran out.
fn lease_text(lease_left: Option<u64>, life: &str) -> String {
    match lease_left {
        Some(secs) => format!("{secs}s"),
        None if life == "active" => "expired".to_string(),
        None => life.to_string(),
    }
}

/// `bytes` with printable ASCII as it is, anything else as `\xNN`, and
/// `\` as `\\`: owner strings and host names are the client's bytes.
pub fn printable(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out
}

/// One line per client, like `showmount -a`: address, protocol, then
/// what is known of it.
pub fn clients_text(clients: &[ClientLine]) -> String {
    let mut out = String::new();
    for c in clients {
        let _ = match c {
            ClientLine::Nlm { name, address } => {
                writeln!(out, "{:<24}\tnlm\tname={name}", address.to_string())
            }
            ClientLine::V4 {
                clientid,
                address,
                owner,
                confirmed,
                sessions,
                implementation,
                minor,
                lease_left,
                life,
                opens,
                locks,
            } => {
                let confirmed = if *confirmed { "" } else { " unconfirmed" };
                let implementation = implementation
                    .as_deref()
                    .map(|i| format!(" implementation={i}"))
                    .unwrap_or_default();
                let lease = lease_text(*lease_left, life);
                writeln!(
                    out,
                    "{:<24}\tnfs4\tclientid={clientid:016x} vers=4.{minor} lease={lease} \
                     sessions={sessions} opens={opens} locks={locks}{confirmed} \
                     owner={owner}{implementation}",
                    address.to_string()
                )
            }
        };
    }
    out
}

/// The clients as a JSON array of objects (`dionfs clients --json`).
pub fn clients_json(clients: &[ClientLine]) -> String {
    let items: Vec<String> = clients
        .iter()
        .map(|c| match c {
            ClientLine::Nlm { name, address } => format!(
                "{{\"protocol\": \"nlm\", \"address\": \"{address}\", \"name\": {}}}",
                json_string(name)
            ),
            ClientLine::V4 {
                clientid,
                address,
                owner,
                confirmed,
                sessions,
                implementation,
                minor,
                lease_left,
                life,
                opens,
                locks,
            } => format!(
                "{{\"protocol\": \"nfs4\", \"address\": \"{address}\", \"clientid\": \"{clientid:016x}\", \
                 \"minor_version\": {minor}, \"lease_remaining\": {}, \"state\": \"{life}\", \
                 \"owner\": {}, \"confirmed\": {confirmed}, \"sessions\": {sessions}, \
                 \"opens\": {opens}, \"locks\": {locks}, \"implementation\": {}}}",
                lease_left.map_or_else(|| "null".to_string(), |s| s.to_string()),
                json_string(owner),
                implementation
                    .as_deref()
                    .map_or_else(|| "null".to_string(), json_string)
            ),
        })
        .collect();
    format!("[{}]\n", items.join(",\n "))
}

/// A JSON string of `s` (already printable, see [`printable`]).
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_are_written_in_the_configs_words_and_parse_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = std::fs::canonicalize(dir.path())
            .unwrap()
            .join("a \"b\" \\");
        std::fs::create_dir(&path).unwrap();
        let mut x = ExportConfig::with_defaults(path);
        x.read_mode = dionfs_dataplane::Mode::DontCache;
        let text = exports_toml(&[&x]);
        assert!(text.contains("read_mode = \"dontcache\"\n"), "{text}");
        assert!(text.contains("squash = \"root_squash\"\n"), "{text}");
        let back =
            dionfs_core::export::Config::from_toml(std::path::Path::new("x"), &text).unwrap();
        assert_eq!(back.exports[0].path, x.path);
        assert_eq!(back.exports[0].read_mode, x.read_mode);
        assert_eq!(back.exports[0].entries, x.entries);
        assert_eq!(back.exports[0], x, "every option reads back the same");
        assert!(!text.contains("[[export.client]]"), "{text}");

        // Several client entries: one section each, in order.
        let mut second = x.entries[0].clone();
        second.clients = vec!["10.0.0.0/8".parse().unwrap()];
        second.options.access = dionfs_core::export::Access::Ro;
        second.options.squash = dionfs_core::export::Squash::NoRootSquash;
        second.options.anonuid = 1000;
        x.entries.push(second);
        let text = exports_toml(&[&x]);
        assert_eq!(text.matches("[[export.client]]").count(), 2, "{text}");
        assert!(
            text.contains(
                "[[export.client]]\nmatch = [\"10.0.0.0/8\"]\naccess = \"ro\"\n\
                 squash = \"no_root_squash\"\nanonuid = 1000\n"
            ),
            "{text}"
        );
        let back =
            dionfs_core::export::Config::from_toml(std::path::Path::new("x"), &text).unwrap();
        assert_eq!(back.exports[0], x, "{text}");
    }

    #[test]
    fn clients_are_one_line_each_and_json_escapes_owners() {
        let clients = [
            ClientLine::Nlm {
                name: "host1".into(),
                address: "10.0.0.1".parse().unwrap(),
            },
            ClientLine::V4 {
                clientid: 7,
                address: "10.0.0.2".parse().unwrap(),
                owner: printable(b"Linux \"x\"\n"),
                confirmed: true,
                sessions: 1,
                implementation: None,
                minor: 2,
                lease_left: Some(57),
                life: "active",
                opens: 3,
                locks: 1,
            },
            ClientLine::V4 {
                clientid: 8,
                address: "10.0.0.3".parse().unwrap(),
                owner: "b".into(),
                confirmed: true,
                sessions: 1,
                implementation: None,
                minor: 1,
                lease_left: None,
                life: "courtesy",
                opens: 1,
                locks: 0,
            },
        ];
        let text = clients_text(&clients);
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.contains("nlm\tname=host1"), "{text}");
        assert!(
            text.contains(
                "\tclientid=0000000000000007 vers=4.2 lease=57s sessions=1 opens=3 locks=1"
            ),
            "{text}"
        );
        assert!(
            text.contains("\tclientid=0000000000000008 vers=4.1 lease=courtesy"),
            "{text}"
        );
        assert!(text.contains("owner=Linux \"x\"\\x0a"), "{text}");
        let json = clients_json(&clients);
        assert!(
            json.contains("\"owner\": \"Linux \\\"x\\\"\\\\x0a\""),
            "{json}"
        );
        assert!(json.contains("\"implementation\": null"), "{json}");
        assert!(
            json.contains("\"minor_version\": 2, \"lease_remaining\": 57, \"state\": \"active\""),
            "{json}"
        );
        assert!(json.contains("\"opens\": 3, \"locks\": 1"), "{json}");
        assert!(
            json.contains("\"lease_remaining\": null, \"state\": \"courtesy\""),
            "{json}"
        );
    }
}
