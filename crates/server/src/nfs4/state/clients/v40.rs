//! Minor version 0's client records (RFC 7530 sections 16.33, 16.34 and
//! 16.30; design: docs/nfs4-complete-design.md, B): SETCLIENTID,
//! SETCLIENTID_CONFIRM and RENEW, in the table EXCHANGE_ID's records are
//! in, the cases numbered as RFC 7530 section 16.33.5 and knfsd's
//! `nfsd4_setclientid` number them.
//!
//! - A record of SETCLIENTID is unconfirmed until SETCLIENTID_CONFIRM
//!   repeats the verifier it was given. The owner's confirmed record, if
//!   any, goes with its state then (the client rebooted).
//! - SETCLIENTID with the confirmed record's verifier and principal (case
//!   1) keeps the clientid: it only changes the callback, when confirmed.
//! - A name held by a 4.1 client, or by another principal, with opens or
//!   locks, is `CLID_INUSE`, with where that client is called back.
//! - RENEW renews the lease of a confirmed record; a courtesy client is
//!   active again, as with SEQUENCE.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use dionfs_proto::nfs4::{
    CbClient4, Netaddr4, Nfsstat4, SetclientidArgs4, SetclientidConfirmArgs4, SetclientidRes4,
    SetclientidResOk4, StateId4, Verifier4,
};
use dionfs_proto::portmap::parse_universal_addr;
use tracing::info;

use super::super::ids::{random_bytes, ClientId, StateOther};
use super::super::{Principal, State};
use super::{Client, CreateSessionSlot, NewClient, Record, ACTIVE, COURTESY, EXPIRED};

/// What a minor version 0 record keeps of its SETCLIENTID.
pub(in crate::nfs4::state) struct Setclientid {
    /// What SETCLIENTID_CONFIRM repeats to confirm the record.
    confirm: Verifier4,
    /// Where and how the server calls the client back.
    pub callback: CbClient4,
    pub callback_ident: u32,
    /// A later SETCLIENTID of the confirmed record (case 1: a new
    /// callback) waiting for its SETCLIENTID_CONFIRM: its confirm
    /// verifier, callback and ident.
    update: Option<(Verifier4, CbClient4, u32)>,
}

/// Where the server calls a minor version 0 client back (RFC 7530
/// section 10.2.1): the callback of its SETCLIENTID, once confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackPath {
    /// `cb_program`, called at version 1.
    pub program: u32,
    /// `callback_ident`, which every CB_COMPOUND carries.
    pub ident: u32,
    /// The client's callback address (`cb_location`), when it is one the
    /// server calls: a TCP address on the host the client calls from.
    pub to: Option<SocketAddr>,
    /// The server's address the SETCLIENTID_CONFIRM came to: calls go
    /// out from it.
    pub from: IpAddr,
}

/// A minor version 0 client's callback path and its state (knfsd's
/// `cl_cb_state`).
#[derive(Debug, Default)]
pub struct Callback40 {
    pub path: Option<CallbackPath>,
    /// The last probe or call on `path` was answered.
    pub up: bool,
    /// Counts the paths set, so that what a call on an older one found
    /// is not taken for the new one.
    pub generation: u64,
}

impl Callback40 {
    /// Records what a call on path `generation` found.
    pub fn record(&mut self, generation: u64, answered: bool) {
        if generation == self.generation {
            self.up = answered;
        }
    }
}

/// `client_using` of a `CLID_INUSE` for a name a 4.1 client holds: it
/// has no callback address of its own.
fn nowhere() -> Netaddr4 {
    Netaddr4 {
        netid: "".into(),
        addr: "".into(),
    }
}

impl State {
    /// SETCLIENTID.
    pub(in crate::nfs4::state) fn setclientid_at(
        &self,
        args: &SetclientidArgs4,
        who: &Principal,
        peer: IpAddr,
        now: Instant,
    ) -> SetclientidRes4 {
        let Ok(confirm) = random_bytes::<8>().map(Verifier4) else {
            return SetclientidRes4::Fail(Nfsstat4::Serverfault);
        };
        let owner = args.client.id.as_bytes();
        let mut table = self.table.lock();
        if let Some(id) = self.confirmed_record(&mut table, owner) {
            let Some(record) = table.records.get_mut(&id) else {
                return SetclientidRes4::Fail(Nfsstat4::Serverfault);
            };
            let same_principal = record.client.principal == *who;
            let same_verifier = record.client.verifier == args.client.verifier;
            let holds = record.holds_state();
            let case_1 = match record.setclientid.as_mut() {
                // A 4.1 client's name, or another principal's, in use.
                None if holds => return SetclientidRes4::ClidInuse(nowhere()),
                Some(held) if !same_principal && holds => {
                    return SetclientidRes4::ClidInuse(held.callback.cb_location.clone());
                }
                // Case 1: the client's callback changes, when confirmed.
                Some(held) if same_principal && same_verifier => {
                    held.update = Some((confirm, args.callback.clone(), args.callback_ident));
                    true
                }
                // Cases 2 and 3: a rebooted client (a new verifier), or a
                // new principal for a name that holds nothing: a new
                // record beside the confirmed one, which goes when the
                // new one is confirmed.
                _ => false,
            };
            if case_1 {
                if let Some(old) = table.owners.get(owner).and_then(|o| o.unconfirmed) {
                    table.remove_client(old);
                }
                return SetclientidRes4::Ok(SetclientidResOk4 {
                    clientid: id,
                    setclientid_confirm: confirm,
                });
            }
        }
        // Case 4 (and 2 and 3): a new unconfirmed record.
        let new = NewClient {
            owner,
            verifier: args.client.verifier,
            minor: 0,
            who,
            address: peer,
        };
        let setclientid = Setclientid {
            confirm,
            callback: args.callback.clone(),
            callback_ident: args.callback_ident,
            update: None,
        };
        let record = |client| Record {
            client,
            confirmed: false,
            flags: 0,
            impl_id: None,
            create_session: CreateSessionSlot::default(),
            sessions: Vec::new(),
            setclientid: Some(setclientid),
        };
        match table.new_record(&new, self.boot, now, record) {
            Ok(clientid) => SetclientidRes4::Ok(SetclientidResOk4 {
                clientid,
                setclientid_confirm: confirm,
            }),
            Err(bound) => SetclientidRes4::Fail(self.refusals.refuse(bound, peer)),
        }
    }

    /// SETCLIENTID_CONFIRM.
    pub(in crate::nfs4::state) fn setclientid_confirm_at(
        &self,
        args: &SetclientidConfirmArgs4,
        who: &Principal,
        now: Instant,
    ) -> Nfsstat4 {
        let mut table = self.table.lock();
        self.forget_if_expired(&mut table, args.clientid);
        // Unknown, another boot's, expired, or a 4.1 client's.
        let Some(record) = table.records.get_mut(&args.clientid) else {
            return Nfsstat4::StaleClientid;
        };
        let Some(held) = record.setclientid.as_mut() else {
            return Nfsstat4::StaleClientid;
        };
        if record.client.principal != *who {
            return Nfsstat4::ClidInuse;
        }
        let verifier = args.setclientid_confirm;
        if record.confirmed {
            // Case 1's second half: the new callback.
            if let Some((confirm, callback, ident)) = held.update.take() {
                if confirm == verifier {
                    (held.confirm, held.callback, held.callback_ident) = (confirm, callback, ident);
                    record.client.renew(now);
                    return Nfsstat4::Ok;
                }
                held.update = Some((confirm, callback, ident));
            }
            // Case 2: a retransmission of the confirmation; case 4: a
            // verifier of no SETCLIENTID here (the server rebooted).
            return if held.confirm == verifier {
                Nfsstat4::Ok
            } else {
                Nfsstat4::StaleClientid
            };
        }
        if held.confirm != verifier {
            return Nfsstat4::StaleClientid;
        }
        // Case 3: a new or rebooted client; the rebooted one's record
        // goes, with its opens and locks.
        record.client.renew(now);
        if let Some(old) = table.confirm(args.clientid) {
            self.release_state(&old);
        }
        Nfsstat4::Ok
    }

    /// After a SETCLIENTID_CONFIRM of `clientid` that succeeded, received
    /// at the server's address `local`: the client's callback path is its
    /// confirmed SETCLIENTID's. The client, when its path is new or not
    /// known to answer (to be probed). A callback address on another host
    /// than the one the client calls from is not called (as a server
    /// would otherwise connect wherever a client names): that client gets
    /// no delegations.
    pub fn confirmed_callback(&self, clientid: u64, local: IpAddr) -> Option<Arc<Client>> {
        let (client, callback, ident) = {
            let table = self.table.lock();
            let record = table.records.get(&clientid)?;
            let held = record.setclientid.as_ref()?;
            if !record.confirmed {
                return None;
            }
            let client = Arc::clone(&record.client);
            (client, held.callback.clone(), held.callback_ident)
        };
        let location = &callback.cb_location;
        let netid = String::from_utf8_lossy(location.netid.as_bytes());
        let addr = String::from_utf8_lossy(location.addr.as_bytes());
        let named = parse_universal_addr(&netid, &addr);
        let to = named.filter(|to| to.ip().to_canonical() == client.address.to_canonical());
        if to.is_none() {
            info!(
                clientid,
                address = %client.address,
                callback = %format_args!("{netid} {addr}"),
                "NFSv4.0 client's callback address is not a TCP address of its own host: \
                 it is not called back and gets no delegations"
            );
        }
        let path = CallbackPath {
            program: callback.cb_program,
            ident,
            to,
            from: local,
        };
        let mut callback = client.callback40.lock();
        if callback.path.as_ref() == Some(&path) && callback.up {
            return None;
        }
        callback.path = Some(path);
        callback.up = false;
        callback.generation += 1;
        drop(callback);
        Some(client)
    }

    /// RENEW of client `clientid`'s lease: `CB_PATH_DOWN` when the
    /// client holds delegations and cannot be called back (RFC 7530
    /// section 16.29.4, knfsd's `nfsd4_renew`).
    pub(in crate::nfs4::state) fn renew_at(&self, clientid: u64, now: Instant) -> Nfsstat4 {
        match self.v40_client_at(clientid, now) {
            Ok(client) if !client.callback40.lock().up && client.holds_delegations() => {
                Nfsstat4::CbPathDown
            }
            Ok(_) => Nfsstat4::Ok,
            Err(status) => status,
        }
    }

    /// The confirmed minor version 0 client `clientid`, its lease
    /// renewed at `now`: what every op naming a clientid or a stateid of
    /// it does (knfsd's `renew_client`), RENEW among them. Another
    /// boot's, or not a 4.0 client's confirmed record: `STALE_CLIENTID`;
    /// expired and dropped: `EXPIRED`. A courtesy client is active
    /// again, as with SEQUENCE.
    pub fn v40_client_at(&self, clientid: u64, now: Instant) -> Result<Arc<Client>, Nfsstat4> {
        if ClientId(clientid).boot() != self.boot {
            return Err(Nfsstat4::StaleClientid);
        }
        let mut table = self.table.lock();
        let Some(record) = table.records.get(&clientid) else {
            // Expired and dropped, or never made.
            return Err(Nfsstat4::Expired);
        };
        if !record.confirmed || record.setclientid.is_none() {
            return Err(Nfsstat4::StaleClientid);
        }
        let client = Arc::clone(&record.client);
        match client.life() {
            EXPIRED => {
                self.forget_client(&mut table, clientid);
                return Err(Nfsstat4::Expired);
            }
            COURTESY => {
                if !client.change_life(COURTESY, ACTIVE) {
                    self.forget_client(&mut table, clientid);
                    return Err(Nfsstat4::Expired);
                }
                self.courtesy.lock().remove(&clientid);
                info!(clientid, "NFSv4.0 courtesy client is back: active again");
            }
            _ => {}
        }
        client.renew(now);
        Ok(client)
    }

    /// The minor version 0 client whose state `stateid` names, its lease
    /// renewed (as [`Self::v40_client_at`]). A special stateid names
    /// none (`BAD_STATEID`); another boot's, or one of a client that is
    /// gone, is `STALE_STATEID` (knfsd's `nfsd4_lookup_stateid` without a
    /// session); an expired client's `EXPIRED`.
    pub fn v40_client_of(&self, stateid: &StateId4, now: Instant) -> Result<Arc<Client>, Nfsstat4> {
        if stateid.other == [0; 12] || stateid.other == [0xff; 12] {
            return Err(Nfsstat4::BadStateid);
        }
        let other = StateOther::from_bytes(&stateid.other);
        if other.boot != self.boot {
            return Err(Nfsstat4::StaleStateid);
        }
        let clientid = ClientId::new(other.boot, other.client).0;
        self.v40_client_at(clientid, now)
            .map_err(|status| match status {
                Nfsstat4::StaleClientid => Nfsstat4::StaleStateid,
                other => other,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::*;
    use super::*;
    use dionfs_proto::nfs4::{NfsClientId4, Opaque4};

    fn args(owner: &str, verifier: u8, port: u8) -> SetclientidArgs4 {
        SetclientidArgs4 {
            client: NfsClientId4 {
                verifier: Verifier4([verifier; 8]),
                id: Opaque4::from(owner),
            },
            callback: CbClient4 {
                cb_program: 0x4000_0000,
                cb_location: Netaddr4 {
                    netid: "tcp".into(),
                    addr: format!("192.0.2.7.3.{port}").as_str().into(),
                },
            },
            callback_ident: u32::from(port),
        }
    }

    fn set(state: &State, owner: &str, verifier: u8, port: u8, who: u32) -> SetclientidResOk4 {
        match state.setclientid_at(
            &args(owner, verifier, port),
            &sys(who),
            peer(),
            Instant::now(),
        ) {
            SetclientidRes4::Ok(ok) => ok,
            other => panic!("{other:?}"),
        }
    }

    fn confirm(state: &State, ok: &SetclientidResOk4, who: u32) -> Nfsstat4 {
        let args = SetclientidConfirmArgs4 {
            clientid: ok.clientid,
            setclientid_confirm: ok.setclientid_confirm,
        };
        state.setclientid_confirm_at(&args, &sys(who), Instant::now())
    }

    /// (confirmed, unconfirmed) records.
    fn clients(state: &State) -> (usize, usize) {
        let counts = state.counts();
        (counts.clients, counts.unconfirmed)
    }

    fn callback_port(state: &State, clientid: u64) -> u32 {
        let table = state.table.lock();
        let record = table.records.get(&clientid).expect("a record");
        record.setclientid.as_ref().expect("v4.0").callback_ident
    }

    #[test]
    fn the_confirmed_callback_path_is_the_client_s_own_address_only() {
        let state = state();
        let local = IpAddr::from([192, 0, 2, 1]);
        let made = set(&state, "linux-a", 1, 10, 1000);
        // Not before the confirmation.
        assert!(state.confirmed_callback(made.clientid, local).is_none());
        assert_eq!(confirm(&state, &made, 1000), Nfsstat4::Ok);
        let client = state
            .confirmed_callback(made.clientid, local)
            .expect("to probe");
        let path = client.callback40.lock().path.clone().expect("a path");
        assert_eq!(path.to, Some(SocketAddr::new(peer(), 3 << 8 | 10)));
        assert_eq!(
            (path.program, path.ident, path.from),
            (0x4000_0000, 10, local)
        );
        // Up once probed; a retransmitted confirmation probes no more.
        let generation = client.callback40.lock().generation;
        client.callback40.lock().record(generation, true);
        assert!(state.confirmed_callback(made.clientid, local).is_none());
        // Case 1: a new callback, confirmed, is probed again; what a call
        // on the old one finds no longer counts.
        let update = set(&state, "linux-a", 1, 20, 1000);
        assert_eq!(confirm(&state, &update, 1000), Nfsstat4::Ok);
        let client = state
            .confirmed_callback(made.clientid, local)
            .expect("to probe");
        let mut callback = client.callback40.lock();
        assert!(!callback.up);
        callback.record(generation, true);
        assert!(!callback.up, "an answer on the old path");
        drop(callback);
        // An address on another host than the client's is never called.
        let mut other = args("linux-b", 1, 30);
        other.callback.cb_location.addr = "198.51.100.9.3.30".into();
        let SetclientidRes4::Ok(made) =
            state.setclientid_at(&other, &sys(1000), peer(), Instant::now())
        else {
            panic!("SETCLIENTID refused");
        };
        assert_eq!(confirm(&state, &made, 1000), Nfsstat4::Ok);
        let client = state
            .confirmed_callback(made.clientid, local)
            .expect("a client");
        assert_eq!(
            client.callback40.lock().path.as_ref().map(|p| p.to),
            Some(None)
        );
    }

    #[test]
    fn a_new_client_is_confirmed_by_its_verifier_alone() {
        let state = state();
        let made = set(&state, "linux-a", 1, 10, 1000);
        assert_eq!(clients(&state), (0, 1));
        let wrong = SetclientidResOk4 {
            setclientid_confirm: Verifier4([0; 8]),
            ..made.clone()
        };
        assert_eq!(confirm(&state, &wrong, 1000), Nfsstat4::StaleClientid);
        // Only the principal that made it confirms it.
        assert_eq!(confirm(&state, &made, 1001), Nfsstat4::ClidInuse);
        assert_eq!(confirm(&state, &made, 1000), Nfsstat4::Ok);
        assert_eq!(clients(&state), (1, 0));
        // Case 2: a retransmitted confirmation.
        assert_eq!(confirm(&state, &made, 1000), Nfsstat4::Ok);
        assert_eq!(state.renew_at(made.clientid, Instant::now()), Nfsstat4::Ok);
    }

    #[test]
    fn case_1_the_same_verifier_changes_only_the_callback_once_confirmed() {
        let state = state();
        let made = set(&state, "linux-a", 1, 10, 1000);
        assert_eq!(confirm(&state, &made, 1000), Nfsstat4::Ok);
        let update = set(&state, "linux-a", 1, 20, 1000);
        assert_eq!(update.clientid, made.clientid);
        assert_ne!(update.setclientid_confirm, made.setclientid_confirm);
        assert_eq!(callback_port(&state, made.clientid), 10);
        // The old confirmation again is a retransmission; the new one
        // takes the callback.
        assert_eq!(confirm(&state, &made, 1000), Nfsstat4::Ok);
        assert_eq!(callback_port(&state, made.clientid), 10);
        assert_eq!(confirm(&state, &update, 1000), Nfsstat4::Ok);
        assert_eq!(callback_port(&state, made.clientid), 20);
        assert_eq!(clients(&state), (1, 0));
    }

    #[test]
    fn a_rebooted_client_replaces_its_record_when_confirmed() {
        let state = state();
        let before = set(&state, "linux-a", 1, 10, 1000);
        assert_eq!(confirm(&state, &before, 1000), Nfsstat4::Ok);
        let after = set(&state, "linux-a", 2, 10, 1000);
        assert_ne!(after.clientid, before.clientid);
        assert_eq!(clients(&state), (1, 1));
        assert_eq!(confirm(&state, &after, 1000), Nfsstat4::Ok);
        assert_eq!(clients(&state), (1, 0));
        // The old clientid is gone: RENEW of it is refused.
        assert_eq!(
            state.renew_at(before.clientid, Instant::now()),
            Nfsstat4::Expired
        );
        // A second SETCLIENTID before confirming replaces the unconfirmed
        // record.
        let a = set(&state, "linux-b", 1, 10, 1000);
        let b = set(&state, "linux-b", 1, 10, 1000);
        assert_ne!(a.clientid, b.clientid);
        assert_eq!(confirm(&state, &a, 1000), Nfsstat4::StaleClientid);
        assert_eq!(confirm(&state, &b, 1000), Nfsstat4::Ok);
    }

    #[test]
    fn a_name_in_use_is_clid_inuse_only_while_its_client_holds_state() {
        let state = state();
        // A 4.1 client with a session holds the name.
        let (id, _session) = session(&state, "shared-name");
        let now = Instant::now();
        let res = state.setclientid_at(&args("shared-name", 9, 10), &sys(1), peer(), now);
        assert_eq!(res, SetclientidRes4::ClidInuse(nowhere()));
        // RENEW is minor version 0's: a 4.1 client's id is not renewed so.
        assert_eq!(state.renew_at(id, now), Nfsstat4::StaleClientid);
        // A 4.0 client that holds nothing: another principal takes the
        // name over (case 3), with a new record.
        let first = set(&state, "v40-name", 1, 10, 1000);
        assert_eq!(confirm(&state, &first, 1000), Nfsstat4::Ok);
        let second = set(&state, "v40-name", 1, 11, 2000);
        assert_ne!(second.clientid, first.clientid);
        assert_eq!(confirm(&state, &second, 2000), Nfsstat4::Ok);
        assert_eq!(state.renew_at(first.clientid, now), Nfsstat4::Expired);
    }

    #[test]
    fn renew_refuses_what_it_does_not_know() {
        let state = state();
        let other_boot = ClientId::new(state.boot.wrapping_add(1), 1).0;
        assert_eq!(
            state.renew_at(other_boot, Instant::now()),
            Nfsstat4::StaleClientid
        );
        let unknown = ClientId::new(state.boot, 4242).0;
        assert_eq!(state.renew_at(unknown, Instant::now()), Nfsstat4::Expired);
        let made = set(&state, "linux-a", 1, 10, 1000);
        assert_eq!(
            state.renew_at(made.clientid, Instant::now()),
            Nfsstat4::StaleClientid
        );
    }
}
