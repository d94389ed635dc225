//! The NFSv4 pseudo-filesystem (RFC 8881 §7.3, §7.7): the tree that joins
//! the exports under one root, as knfsd's does. An export at `/srv/a` is
//! reached at `/srv/a` from the root; `/` and `/srv` are pseudo
//! directories, read-only, with no files of their own.
//!
//! One [`Namespace`] is built per export list ([`NamespaceCache`] keeps the
//! last one, so a reload makes a new tree and a COMPOUND uses the tree of
//! the list it was received with). What a client sees depends on who it
//! is: only the pseudo directories on the way to exports it may mount
//! (`ExportConfig::admits_client`); any other name is `NOENT` to LOOKUP
//! and missing from READDIR. `secure` is not checked here: crossing into
//! the export does that, as a PUTFH of one of its handles would.
//!
//! Pseudo directories are named by [`PathId`] (a hash of their path,
//! inside their handles: `dionfs_fs::handle::encode_pseudo`), which is
//! also their fileid. A handle whose path is gone from the current tree
//! is stale.
//!
//! Exports may nest (`/srv` and `/srv/b/c`): a client that may use both
//! crosses from the outer into the inner one when a LOOKUP inside the
//! outer export reaches the inner one's root ([`Namespace::crossing`],
//! against the `(fsid, fileid)` of the nested roots, taken when the tree
//! is built). A client that may use only the inner one reaches it through
//! pseudo directories, as if the outer were not exported.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::{Arc, Weak};

pub use dionfs_core::export::Client;
use dionfs_core::export::{ClientMatch, ExportConfig};
use dionfs_core::exports::Exports;
use dionfs_fs::handle::PathId;
use dionfs_fs::{ops, Time};
use dionfs_proto::nfs4::Fsid4;
use parking_lot::Mutex;

/// The pseudo-filesystem's fsid.
pub const PSEUDO_FSID: Fsid4 = Fsid4 { major: 0, minor: 0 };

/// The fsid of an export: its own, so that a client sees a crossing into
/// it, and stable across restarts because export ids are.
pub fn export_fsid(export: u16) -> Fsid4 {
    Fsid4 {
        major: 1 + u64::from(export),
        minor: 0,
    }
}

/// An export as the tree knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportEntry {
    pub id: u16,
    /// Its canonical absolute path, as clients mount it.
    pub path: std::path::PathBuf,
    /// The clients of all its client entries: who may see it (which
    /// options each gets is the export's business once a client is in).
    pub clients: Vec<ClientMatch>,
    /// `(Attr::fsid, Attr::fileid)` of its root, for an export inside
    /// another one: what a LOOKUP inside the outer export finds when it
    /// reaches it. `None` for the others, or when its root could not be
    /// read.
    pub root: Option<(u64, u64)>,
}

impl ExportEntry {
    /// The entry of an export with this configuration (no root identity).
    pub fn of(config: &ExportConfig) -> ExportEntry {
        ExportEntry {
            id: config.id,
            path: config.path.clone(),
            clients: config.all_clients().cloned().collect(),
            root: None,
        }
    }

    fn admits(&self, client: Client<'_>) -> bool {
        self.clients.iter().any(|c| c.matches_client(client))
    }
}

/// What a name leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A pseudo directory.
    Pseudo(PathId),
    /// The root of this export (its `root_handle()`).
    ExportRoot(u16),
    /// Nothing this client may see.
    NotFound,
}

/// Where LOOKUPP from an export's root goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportParent {
    /// To this pseudo directory.
    Pseudo(PathId),
    /// To a directory of an outer export the client may use: `dir`, the
    /// components from that export's root (none: the root itself).
    InExport { export: u16, dir: Vec<Vec<u8>> },
    /// Nowhere: the export is at `/` (`NOENT`).
    None,
}

/// What an export root's `mounted_on_fileid` is: the fileid of the
/// directory it is reached from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountedOn {
    /// The pseudo directory at its path: this fileid.
    Pseudo(u64),
    /// In an outer export the client may use: `d_ino` of the entry `name`
    /// of the directory `dir` (components from that export's root), as
    /// READDIR of that directory reports it.
    InExport {
        export: u16,
        dir: Vec<Vec<u8>>,
        name: Vec<u8>,
    },
    /// The export is at `/`, reached from nothing: its own fileid.
    Itself,
}

/// One entry of a pseudo directory, as READDIR lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PseudoEntry<'a> {
    pub name: &'a [u8],
    /// [`Found::Pseudo`] or [`Found::ExportRoot`].
    pub found: Found,
    /// The pseudo directory's fileid: the entry's own for a pseudo
    /// directory, the `mounted_on_fileid` of an export root.
    pub fileid: u64,
}

/// One directory of the tree.
#[derive(Debug)]
struct Node {
    id: PathId,
    /// Its last component (empty for the root).
    name: Vec<u8>,
    parent: Option<usize>,
    children: BTreeMap<Vec<u8>, usize>,
    /// The export at this path (index into `Namespace::exports`).
    export: Option<usize>,
    /// The exports at or below this path: the node is visible to the
    /// clients one of them admits.
    reach: Vec<usize>,
}

/// The pseudo-filesystem of one export list.
#[derive(Debug)]
pub struct Namespace {
    nodes: Vec<Node>,
    by_id: HashMap<PathId, usize>,
    exports: Vec<ExportEntry>,
    /// The node of each export, by index.
    export_nodes: Vec<usize>,
    by_export_id: HashMap<u16, usize>,
    /// Whether an export has others below it.
    nests: Vec<bool>,
    /// Nested export roots by `(fsid, fileid)`.
    crossings: HashMap<(u64, u64), usize>,
    /// The pseudo directories' times (and so their `change`).
    stamp: Time,
}

/// The index of the root node.
const ROOT: usize = 0;

/// The components of an absolute path, as bytes (`.` and `..` cannot
/// occur in a canonical export path; they are skipped if they do).
fn components(path: &Path) -> Vec<&[u8]> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.as_bytes()),
            _ => None,
        })
        .collect()
}

/// The path a node's id hashes: components joined by `/`, `/` alone for
/// the root.
fn path_bytes(components: &[&[u8]]) -> Vec<u8> {
    if components.is_empty() {
        return b"/".to_vec();
    }
    let mut path = Vec::new();
    for c in components {
        path.push(b'/');
        path.extend_from_slice(c);
    }
    path
}

impl Namespace {
    /// The tree of `exports`, its pseudo directories stamped `stamp`.
    /// Two exports at one path: the first one counts (the config refuses
    /// that anyway).
    pub fn build(exports: Vec<ExportEntry>, stamp: Time) -> Namespace {
        let mut ns = Namespace {
            nodes: vec![Node {
                id: PathId::of(b"/"),
                name: Vec::new(),
                parent: None,
                children: BTreeMap::new(),
                export: None,
                reach: Vec::new(),
            }],
            by_id: HashMap::new(),
            exports: Vec::new(),
            export_nodes: Vec::new(),
            by_export_id: HashMap::new(),
            nests: Vec::new(),
            crossings: HashMap::new(),
            stamp,
        };
        ns.by_id.insert(ns.nodes[ROOT].id, ROOT);
        for entry in exports {
            let parts = components(&entry.path);
            let mut at = ROOT;
            for (depth, name) in parts.iter().enumerate() {
                at = match ns.nodes[at].children.get(*name) {
                    Some(&child) => child,
                    None => ns.add_node(at, name, &parts[..=depth]),
                };
            }
            if ns.nodes[at].export.is_some() || ns.by_export_id.contains_key(&entry.id) {
                tracing::warn!(path = %entry.path.display(), "two exports at one path or with one id: NFSv4 shows the first");
                continue;
            }
            let index = ns.exports.len();
            ns.nodes[at].export = Some(index);
            ns.by_export_id.insert(entry.id, index);
            ns.export_nodes.push(at);
            let mut up = Some(at);
            while let Some(n) = up {
                ns.nodes[n].reach.push(index);
                up = ns.nodes[n].parent;
            }
            ns.exports.push(entry);
        }
        ns.nests = (0..ns.exports.len())
            .map(|i| ns.nodes[ns.export_nodes[i]].reach.len() > 1)
            .collect();
        let crossings: Vec<((u64, u64), usize)> = (0..ns.exports.len())
            .filter(|&i| ns.outer_export(i, None).is_some())
            .filter_map(|i| Some((ns.exports[i].root?, i)))
            .collect();
        for (root, i) in crossings {
            ns.crossings.entry(root).or_insert(i);
        }
        ns
    }

    fn add_node(&mut self, parent: usize, name: &[u8], path: &[&[u8]]) -> usize {
        let id = PathId::of(&path_bytes(path));
        let index = self.nodes.len();
        self.nodes.push(Node {
            id,
            name: name.to_vec(),
            parent: Some(parent),
            children: BTreeMap::new(),
            export: None,
            reach: Vec::new(),
        });
        self.nodes[parent].children.insert(name.to_vec(), index);
        match self.by_id.entry(id) {
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(index);
            }
            // Two paths with one 64-bit hash: the later one is reachable
            // by LOOKUP, but its handle names the earlier one.
            std::collections::hash_map::Entry::Occupied(_) => tracing::error!(
                path = %String::from_utf8_lossy(&path_bytes(path)),
                "NFSv4 pseudo path hash collision"
            ),
        }
        index
    }

    /// The tree of the exports served, its pseudo directories stamped
    /// `stamp`. Blocking: the roots of exports inside other exports are
    /// opened and stat'ed (for [`Namespace::crossing`]); a root that
    /// cannot be is logged and cannot be crossed into from its outer
    /// export (it stays reachable through the pseudo directories).
    pub fn of(exports: &Exports, stamp: Time) -> Namespace {
        let entries = exports
            .iter()
            .map(|x| {
                let mut entry = ExportEntry::of(&x.config);
                let nested = exports
                    .iter()
                    .any(|outer| outer.config.path != x.config.path && x.config.path.starts_with(&outer.config.path));
                if nested {
                    let root = x
                        .fs
                        .resolve(x.fs.root_handle())
                        .and_then(|node| ops::getattr(&x.fs, &node));
                    match root {
                        Ok(attr) => entry.root = Some((attr.fsid, attr.fileid)),
                        Err(e) => tracing::warn!(path = %x.config.path.display(), error = %e,
                            "cannot read the root of a nested export: NFSv4 clients reach it only from the pseudo-root"),
                    }
                }
                entry
            })
            .collect();
        Namespace::build(entries, stamp)
    }

    /// The root: an export's root if an export at `/` admits the client,
    /// else the pseudo root (always there, if empty).
    pub fn root(&self, client: Client<'_>) -> Found {
        self.found(ROOT, client)
    }

    /// The pseudo root's id.
    pub fn root_id(&self) -> PathId {
        self.nodes[ROOT].id
    }

    /// The pseudo directory `id`, if it is in this tree (if not, its
    /// handle is stale).
    pub fn node(&self, id: PathId) -> Option<PseudoDir<'_>> {
        let &index = self.by_id.get(&id)?;
        Some(PseudoDir { ns: self, index })
    }

    /// The time of every pseudo directory (access, modify, metadata,
    /// create) and the source of their `change`.
    pub fn stamp(&self) -> Time {
        self.stamp
    }

    /// Whether `export` has other exports below it, so that a LOOKUP in
    /// it may cross into one ([`Namespace::crossing`]).
    pub fn has_nested(&self, export: u16) -> bool {
        self.by_export_id
            .get(&export)
            .is_some_and(|&i| self.nests[i])
    }

    /// The export a LOOKUP inside `from` crosses into, having found a
    /// directory with this `(Attr::fsid, Attr::fileid)`: the root of an
    /// export below `from` that admits the client, or `None` (stay in
    /// `from`).
    pub fn crossing(&self, from: u16, fsid: u64, fileid: u64, client: Client<'_>) -> Option<u16> {
        let &from = self.by_export_id.get(&from)?;
        if !self.nests[from] {
            return None;
        }
        let &inner = self.crossings.get(&(fsid, fileid))?;
        let below = self
            .ancestors(self.export_nodes[inner])
            .skip(1)
            .any(|n| n == self.export_nodes[from]);
        (below && self.exports[inner].admits(client)).then_some(self.exports[inner].id)
    }

    /// Where LOOKUPP from the root of `export` goes for this client;
    /// `None` for an export not in this tree.
    pub fn export_parent(&self, export: u16, client: Client<'_>) -> Option<ExportParent> {
        let &index = self.by_export_id.get(&export)?;
        let node = self.export_nodes[index];
        let Some(parent) = self.nodes[node].parent else {
            return Some(ExportParent::None);
        };
        Some(match self.outer_export(index, Some(client)) {
            Some((outer, dir)) => ExportParent::InExport {
                export: self.exports[outer].id,
                dir,
            },
            None => ExportParent::Pseudo(self.nodes[parent].id),
        })
    }

    /// Where the root of `export` is reached from, for its
    /// `mounted_on_fileid`; `None` for an export not in this tree.
    pub fn mounted_on(&self, export: u16, client: Client<'_>) -> Option<MountedOn> {
        let &index = self.by_export_id.get(&export)?;
        let node = self.export_nodes[index];
        if node == ROOT {
            return Some(MountedOn::Itself);
        }
        Some(match self.outer_export(index, Some(client)) {
            Some((outer, dir)) => MountedOn::InExport {
                export: self.exports[outer].id,
                dir,
                name: self.nodes[node].name.clone(),
            },
            None => MountedOn::Pseudo(self.nodes[node].id.fileid()),
        })
    }

    /// The nearest export above export `index` (admitting `client`, if
    /// given), and the components from its root to the directory that
    /// holds export `index`'s root.
    fn outer_export(
        &self,
        index: usize,
        client: Option<Client<'_>>,
    ) -> Option<(usize, Vec<Vec<u8>>)> {
        let node = self.export_nodes[index];
        let mut dir = Vec::new();
        let mut at = self.nodes[node].parent?;
        loop {
            if let Some(outer) = self.nodes[at].export {
                if client.is_none_or(|c| self.exports[outer].admits(c)) {
                    dir.reverse();
                    return Some((outer, dir));
                }
            }
            dir.push(self.nodes[at].name.clone());
            at = self.nodes[at].parent?;
        }
    }

    /// `node` and the nodes above it, up to the root.
    fn ancestors(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(node), |&n| self.nodes[n].parent)
    }

    /// Whether the client may see node `index`: the root always, another
    /// node if an export at or below it admits the client.
    fn visible(&self, index: usize, client: Client<'_>) -> bool {
        index == ROOT
            || self.nodes[index]
                .reach
                .iter()
                .any(|&x| self.exports[x].admits(client))
    }

    /// What node `index` is to this client.
    fn found(&self, index: usize, client: Client<'_>) -> Found {
        let node = &self.nodes[index];
        if let Some(x) = node.export {
            if self.exports[x].admits(client) {
                return Found::ExportRoot(self.exports[x].id);
            }
        }
        if self.visible(index, client) {
            Found::Pseudo(node.id)
        } else {
            Found::NotFound
        }
    }
}

/// A pseudo directory of a [`Namespace`].
#[derive(Debug, Clone, Copy)]
pub struct PseudoDir<'a> {
    ns: &'a Namespace,
    index: usize,
}

impl<'a> PseudoDir<'a> {
    pub fn id(&self) -> PathId {
        self.ns.nodes[self.index].id
    }

    /// Its fileid (and `mounted_on_fileid`): the path hash.
    pub fn fileid(&self) -> u64 {
        self.id().fileid()
    }

    /// Whether the client may see this directory (else its handle gets
    /// what an unknown name gets).
    pub fn visible_to(&self, client: Client<'_>) -> bool {
        self.ns.visible(self.index, client)
    }

    /// LOOKUP of `name` in this directory.
    pub fn lookup(&self, name: &[u8], client: Client<'_>) -> Found {
        match self.ns.nodes[self.index].children.get(name) {
            Some(&child) => self.ns.found(child, client),
            None => Found::NotFound,
        }
    }

    /// LOOKUPP: the directory above, `None` at the root (`NOENT`).
    pub fn parent(&self) -> Option<PathId> {
        let parent = self.ns.nodes[self.index].parent?;
        Some(self.ns.nodes[parent].id)
    }

    /// READDIR: the entries the client may see, in name order.
    pub fn readdir(&self, client: Client<'_>) -> Vec<PseudoEntry<'a>> {
        let ns = self.ns;
        ns.nodes[self.index]
            .children
            .iter()
            .filter_map(|(name, &child)| match ns.found(child, client) {
                Found::NotFound => None,
                found => Some(PseudoEntry {
                    name,
                    found,
                    fileid: ns.nodes[child].id.fileid(),
                }),
            })
            .collect()
    }

    /// Its path, for logs.
    pub fn path(&self) -> Vec<u8> {
        let mut names: Vec<&[u8]> = self
            .ns
            .ancestors(self.index)
            .map(|n| self.ns.nodes[n].name.as_slice())
            .filter(|n| !n.is_empty())
            .collect();
        names.reverse();
        path_bytes(&names)
    }
}

/// The namespace of the export list served last, built once per list.
#[derive(Debug, Default)]
pub struct NamespaceCache {
    /// The list the tree was built from, held weakly: compared by
    /// pointer (the allocation stays while the `Weak` does, so a new
    /// list never gets the old one's address), never kept alive.
    last: Mutex<Option<(Weak<Exports>, Arc<Namespace>)>>,
}

impl NamespaceCache {
    /// The tree of `exports`: the last one if it was built from this
    /// list, else a new one ([`Namespace::of`]: blocking when exports
    /// nest). A new tree keeps the last one's stamp if it has the same
    /// exports at the same paths for the same clients (a reload that
    /// changed only other options), else takes `now`, so clients see the
    /// pseudo directories change.
    pub fn get(&self, exports: &Arc<Exports>, now: Time) -> Arc<Namespace> {
        let mut last = self.last.lock();
        if let Some((list, ns)) = last.as_ref() {
            if Weak::ptr_eq(list, &Arc::downgrade(exports)) {
                return Arc::clone(ns);
            }
        }
        let mut ns = Namespace::of(exports, now);
        if let Some((_, old)) = last.as_ref() {
            if same_layout(old, &ns) {
                ns.stamp = old.stamp;
            }
        }
        let ns = Arc::new(ns);
        *last = Some((Arc::downgrade(exports), Arc::clone(&ns)));
        ns
    }
}

/// Whether two trees show every client the same directories.
fn same_layout(a: &Namespace, b: &Namespace) -> bool {
    let key = |x: &ExportEntry| (x.id, x.path.clone(), x.clients.clone());
    a.exports.iter().map(key).eq(b.exports.iter().map(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u16, path: &str, clients: &[&str]) -> ExportEntry {
        ExportEntry {
            id,
            path: path.into(),
            clients: clients.iter().map(|c| c.parse().expect("client")).collect(),
            root: None,
        }
    }

    fn client(ip: &str) -> Client<'static> {
        Client::at(ip.parse().expect("ip"))
    }

    const STAMP: Time = Time {
        seconds: 1_700_000_000,
        nanos: 5,
    };

    fn id(path: &str) -> PathId {
        PathId::of(path.as_bytes())
    }

    /// Follows `path` from the root as `who`, pseudo directory by pseudo
    /// directory, and says what the last component is.
    fn walk(ns: &Namespace, path: &str, who: Client<'_>) -> Found {
        let mut at = ns.root(who);
        for name in path.split('/').filter(|n| !n.is_empty()) {
            let Found::Pseudo(dir) = at else {
                return Found::NotFound;
            };
            at = ns.node(dir).expect("node").lookup(name.as_bytes(), who);
        }
        at
    }

    fn names(ns: &Namespace, dir: &str, who: Client<'_>) -> Vec<String> {
        ns.node(id(dir))
            .expect("node")
            .readdir(who)
            .iter()
            .map(|e| String::from_utf8_lossy(e.name).into_owned())
            .collect()
    }

    /// `/srv/a` for 10.0.0.0/8, `/srv/b/c` for 192.168.1.5 alone.
    fn two_exports() -> Namespace {
        Namespace::build(
            vec![
                entry(1, "/srv/a", &["10.0.0.0/8"]),
                entry(2, "/srv/b/c", &["192.168.1.5"]),
            ],
            STAMP,
        )
    }

    #[test]
    fn each_client_sees_only_the_way_to_its_exports() {
        let ns = two_exports();
        let ten = client("10.1.2.3");
        let home = client("192.168.1.5");
        let stranger = client("172.16.0.1");

        assert_eq!(ns.root(ten), Found::Pseudo(id("/")));
        assert_eq!(walk(&ns, "/srv", ten), Found::Pseudo(id("/srv")));
        assert_eq!(walk(&ns, "/srv/a", ten), Found::ExportRoot(1));
        assert_eq!(walk(&ns, "/srv/b", ten), Found::NotFound);
        assert_eq!(walk(&ns, "/srv/b/c", ten), Found::NotFound);
        assert_eq!(names(&ns, "/", ten), ["srv"]);
        assert_eq!(names(&ns, "/srv", ten), ["a"]);

        assert_eq!(walk(&ns, "/srv/a", home), Found::NotFound);
        assert_eq!(walk(&ns, "/srv/b", home), Found::Pseudo(id("/srv/b")));
        assert_eq!(walk(&ns, "/srv/b/c", home), Found::ExportRoot(2));
        assert_eq!(names(&ns, "/srv", home), ["b"]);
        assert_eq!(names(&ns, "/srv/b", home), ["c"]);

        // The root is there for everyone, empty for a stranger.
        assert_eq!(ns.root(stranger), Found::Pseudo(id("/")));
        assert!(ns.node(id("/")).expect("root").visible_to(stranger));
        assert_eq!(names(&ns, "/", stranger), Vec::<String>::new());
        assert_eq!(walk(&ns, "/srv", stranger), Found::NotFound);

        // A handle of a directory the client may not see, and names that
        // are not there.
        let b = ns.node(id("/srv/b")).expect("b");
        assert!(b.visible_to(home));
        assert!(!b.visible_to(ten));
        assert_eq!(b.lookup(b"nothing", home), Found::NotFound);
        assert_eq!(b.lookup(b"..", home), Found::NotFound);
        assert_eq!(b.lookup(b".", home), Found::NotFound);
        assert_eq!(b.path(), b"/srv/b");
    }

    #[test]
    fn readdir_gives_fileids_and_what_each_entry_is() {
        let ns = Namespace::build(
            vec![
                entry(1, "/srv/a", &["10.0.0.0/8"]),
                entry(2, "/srv/b/c", &["10.0.0.0/8"]),
            ],
            STAMP,
        );
        let srv = ns.node(id("/srv")).expect("srv");
        let entries = srv.readdir(client("10.0.0.1"));
        assert_eq!(
            entries,
            vec![
                PseudoEntry {
                    name: b"a",
                    found: Found::ExportRoot(1),
                    fileid: id("/srv/a").fileid(),
                },
                PseudoEntry {
                    name: b"b",
                    found: Found::Pseudo(id("/srv/b")),
                    fileid: id("/srv/b").fileid(),
                },
            ]
        );
        assert_eq!(srv.fileid(), id("/srv").fileid());
        assert_eq!(ns.stamp(), STAMP);
    }

    #[test]
    fn lookupp_climbs_to_the_root() {
        let ns = two_exports();
        let home = client("192.168.1.5");
        let mut at = id("/srv/b");
        let mut seen = vec![ns.node(at).expect("node").path()];
        while let Some(parent) = ns.node(at).expect("node").parent() {
            at = parent;
            seen.push(ns.node(at).expect("node").path());
        }
        assert_eq!(seen, [b"/srv/b".to_vec(), b"/srv".to_vec(), b"/".to_vec()]);
        assert_eq!(at, ns.root_id());
        // From an export root, to the pseudo directory above it.
        assert_eq!(
            ns.export_parent(2, home),
            Some(ExportParent::Pseudo(id("/srv/b")))
        );
        assert_eq!(
            ns.export_parent(1, client("10.0.0.1")),
            Some(ExportParent::Pseudo(id("/srv")))
        );
        assert_eq!(ns.export_parent(9, home), None);
        assert_eq!(
            ns.mounted_on(2, home),
            Some(MountedOn::Pseudo(id("/srv/b/c").fileid()))
        );
        assert!(!ns.has_nested(1));
        assert_eq!(ns.crossing(1, 1, 1, home), None);
    }

    #[test]
    fn an_export_at_the_root_is_the_root() {
        let ns = Namespace::build(
            vec![
                entry(7, "/", &["10.0.0.0/8"]),
                entry(8, "/srv/x", &["192.168.0.0/16", "10.0.0.0/8"]),
            ],
            STAMP,
        );
        let ten = client("10.0.0.1");
        let other = client("192.168.3.3");
        assert_eq!(ns.root(ten), Found::ExportRoot(7));
        assert_eq!(ns.export_parent(7, ten), Some(ExportParent::None));
        assert_eq!(ns.mounted_on(7, ten), Some(MountedOn::Itself));
        // A client the root export does not admit gets the pseudo root
        // on the way to its own export.
        assert_eq!(ns.root(other), Found::Pseudo(id("/")));
        assert_eq!(walk(&ns, "/srv/x", other), Found::ExportRoot(8));
        assert_eq!(
            ns.export_parent(8, other),
            Some(ExportParent::Pseudo(id("/srv")))
        );
        assert_eq!(
            ns.mounted_on(8, other),
            Some(MountedOn::Pseudo(id("/srv/x").fileid()))
        );
        // A client of both reaches /srv/x inside the root export, and
        // goes back up into it.
        assert!(ns.has_nested(7));
        assert_eq!(
            ns.export_parent(8, ten),
            Some(ExportParent::InExport {
                export: 7,
                dir: vec![b"srv".to_vec()],
            })
        );
        assert_eq!(
            ns.mounted_on(8, ten),
            Some(MountedOn::InExport {
                export: 7,
                dir: vec![b"srv".to_vec()],
                name: b"x".to_vec(),
            })
        );
    }

    #[test]
    fn nested_exports_cross_for_clients_of_both() {
        let mut inner = entry(2, "/srv/b/c", &["10.0.0.0/8", "192.168.1.5"]);
        inner.root = Some((0x800000001, 4242));
        let ns = Namespace::build(vec![entry(1, "/srv", &["10.0.0.0/8"]), inner], STAMP);
        let both = client("10.9.9.9");
        let inner_only = client("192.168.1.5");

        assert!(ns.has_nested(1));
        assert!(!ns.has_nested(2));
        assert_eq!(ns.crossing(1, 0x800000001, 4242, both), Some(2));
        // Not for a client the inner export does not admit, nor for another
        // directory, nor from the inner export itself.
        assert_eq!(
            ns.crossing(1, 0x800000001, 4242, client("192.168.9.9")),
            None
        );
        assert_eq!(ns.crossing(1, 0x800000001, 4243, both), None);
        assert_eq!(ns.crossing(2, 0x800000001, 4242, both), None);

        // Up from the inner root: into the outer export for its clients,
        // through pseudo directories for the others.
        assert_eq!(
            ns.export_parent(2, both),
            Some(ExportParent::InExport {
                export: 1,
                dir: vec![b"b".to_vec()],
            })
        );
        assert_eq!(
            ns.mounted_on(2, both),
            Some(MountedOn::InExport {
                export: 1,
                dir: vec![b"b".to_vec()],
                name: b"c".to_vec(),
            })
        );
        assert_eq!(
            ns.export_parent(2, inner_only),
            Some(ExportParent::Pseudo(id("/srv/b")))
        );
        assert_eq!(
            ns.mounted_on(2, inner_only),
            Some(MountedOn::Pseudo(id("/srv/b/c").fileid()))
        );
        assert_eq!(walk(&ns, "/srv", both), Found::ExportRoot(1));
        assert_eq!(walk(&ns, "/srv", inner_only), Found::Pseudo(id("/srv")));
        assert_eq!(walk(&ns, "/srv/b/c", inner_only), Found::ExportRoot(2));
        assert_eq!(
            ns.mounted_on(1, both),
            Some(MountedOn::Pseudo(id("/srv").fileid()))
        );
    }

    #[test]
    fn a_reload_makes_a_new_tree_without_the_removed_paths() {
        let before = two_exports();
        let after = Namespace::build(vec![entry(1, "/srv/a", &["10.0.0.0/8"])], STAMP);
        assert!(before.node(id("/srv/b")).is_some());
        assert!(after.node(id("/srv/b")).is_none());
        assert!(after.node(id("/srv/b/c")).is_none());
        assert_eq!(
            walk(&after, "/srv/b/c", client("192.168.1.5")),
            Found::NotFound
        );
        // The paths that stay keep their ids, so their handles live on.
        assert_eq!(after.node(id("/srv")).map(|n| n.id()), Some(id("/srv")));
        assert_eq!(after.root_id(), before.root_id());
    }

    /// Real exports (opened as a server opens them) at `dir/srv` and
    /// `dir/srv/b/c`.
    fn server_with(dir: &Path, paths: &[&str]) -> Arc<dionfs_core::server::Server> {
        use dionfs_core::export::{Config, ServerSettings};
        let exports = paths
            .iter()
            .map(|p| {
                let path = dir.join(p.trim_start_matches('/'));
                std::fs::create_dir_all(&path).expect("mkdir");
                let mut x = ExportConfig::with_defaults(path.canonicalize().expect("canonical"));
                x.entries[0].options.secure = false;
                x
            })
            .collect();
        let config = Config {
            server: ServerSettings {
                state_dir: dir.join("state"),
                io_uring: false,
                max_in_flight: 4,
                ..ServerSettings::default()
            },
            exports,
        };
        Arc::new(dionfs_core::server::Server::open(&config).expect("server"))
    }

    #[test]
    fn a_tree_of_real_exports_crosses_into_nested_ones_and_is_memoized() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = server_with(dir.path(), &["/srv", "/srv/b/c"]);
        let exports = server.exports();
        let cache = NamespaceCache::default();
        let ns = cache.get(&exports, STAMP);
        assert!(Arc::ptr_eq(&ns, &cache.get(&exports, Time::default())));

        let outer = &exports[0];
        let inner = &exports[1];
        let loopback = client("127.0.0.1");
        let root = outer.fs.resolve(outer.fs.root_handle()).expect("root");
        let (b, _) = outer.fs.lookup(&root, b"b").expect("b");
        let (_, c) = outer.fs.lookup(&b, b"c").expect("c");
        assert_eq!(
            ns.crossing(outer.config.id, c.fsid, c.fileid, loopback),
            Some(inner.config.id)
        );
        let (_, b_attr) = outer.fs.lookup(&root, b"b").expect("b");
        assert_eq!(
            ns.crossing(outer.config.id, b_attr.fsid, b_attr.fileid, loopback),
            None
        );
        assert_eq!(
            ns.export_parent(inner.config.id, loopback),
            Some(ExportParent::InExport {
                export: outer.config.id,
                dir: vec![b"b".to_vec()],
            })
        );
    }

    #[test]
    fn a_reload_gets_a_new_tree_and_keeps_the_stamp_if_nothing_moved() {
        let dir = tempfile::tempdir().expect("tempdir");
        let server = server_with(dir.path(), &["/srv/a", "/srv/b/c"]);
        let first = server.exports();
        let cache = NamespaceCache::default();
        let ns = cache.get(&first, STAMP);
        let b = ns
            .node(PathId::of(
                first[1]
                    .config
                    .path
                    .parent()
                    .expect("b")
                    .as_os_str()
                    .as_bytes(),
            ))
            .expect("b is a pseudo directory")
            .id();

        // The same exports in a new list (a reload that changed other
        // options): a new tree, the same stamp.
        let again = Arc::new(Exports::new(first.to_vec()));
        let same = cache.get(&again, Time::default());
        assert!(!Arc::ptr_eq(&ns, &same));
        assert_eq!(same.stamp(), STAMP);
        assert!(same.node(b).is_some());

        // /srv/b/c removed: a new stamp, and b's handle is stale.
        let fewer = Arc::new(Exports::new(vec![Arc::clone(&first[0])]));
        let later = Time {
            seconds: STAMP.seconds + 60,
            nanos: 0,
        };
        let reloaded = cache.get(&fewer, later);
        assert_eq!(reloaded.stamp(), later);
        assert!(reloaded.node(b).is_none());
        assert!(reloaded.node(reloaded.root_id()).is_some());
    }
}
