//! The calls the lock service makes to clients, queued: GRANTED
//! callbacks, the `_RES` calls answering `_MSG` ones, and SM_NOTIFY after
//! a restart. Each may wait for its client for seconds, so they are made
//! on blocking threads, bounded per client and over all clients.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dionfs_proto::nlm4::{NlmProc4, NLM_PROGRAM, NLM_V4};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::warn;

use super::client::{self, Peer};
use super::granted::Grant;
use super::reboot;
use super::state::Monitored;
use super::LockService;

/// Work for the callback task.
pub(super) enum Job {
    /// A blocked lock was taken for its owner: tell the client.
    Granted(Box<Grant>),
    /// The answer to a `_MSG` call, sent as the matching `_RES` call.
    Res {
        peer: Peer,
        proc_: NlmProc4,
        results: Vec<u8>,
    },
    /// Tell a client's statd that this server restarted.
    Notify { host: Monitored, state: i32 },
}

impl Job {
    /// The address of the client the call goes to.
    fn client(&self) -> IpAddr {
        match self {
            Job::Granted(g) => g.callback.peer.client,
            Job::Res { peer, .. } => peer.client,
            Job::Notify { host, .. } => host.client,
        }
    }
}

/// Calls to clients made at once, over all clients.
const CALLBACK_THREADS: usize = 8;
/// SM_NOTIFYs of a restart sent at once: each client is told once, and
/// all of them must hear within the grace period, dead ones among them
/// taking 6 s each.
const NOTIFY_THREADS: usize = 64;
/// Calls to one client address waiting for the one in progress; more are
/// dropped (counted, logged at most every 10 s).
const MAX_QUEUED_PER_CLIENT: usize = 64;

/// The calls to clients waiting, per client address; an address is here
/// while its calls are being made.
type ClientQueues = Arc<Mutex<HashMap<IpAddr, VecDeque<Job>>>>;

/// Makes the calls to clients: the SM_NOTIFYs of a restart at most
/// [`NOTIFY_THREADS`] at once; the others one at a time per client
/// address, in the order they came, and at most [`CALLBACK_THREADS`] at
/// once over all clients. Each may wait for its client for seconds (5 s a try, and
/// GRANTED tries five times): a client whose port mapper or lock manager
/// does not answer, sent `_MSG` calls as fast as it can send them, then
/// holds one blocking thread and a bounded queue, where it held a
/// blocking thread per call, out of the pool every NFS READ and WRITE
/// waits for. A dropped `_RES` is a reply lost (the client's timeout); a
/// dropped GRANTED leaves the lock held for its owner, whose client asks
/// again while it waits and is then answered GRANTED.
pub(super) async fn run_jobs(service: Arc<LockService>, mut rx: mpsc::UnboundedReceiver<Job>) {
    let queues = ClientQueues::default();
    let threads = Arc::new(tokio::sync::Semaphore::new(CALLBACK_THREADS));
    let notify_threads = Arc::new(tokio::sync::Semaphore::new(NOTIFY_THREADS));
    while let Some(job) = rx.recv().await {
        if let Job::Notify { .. } = job {
            let (s, threads) = (service.clone(), notify_threads.clone());
            tokio::spawn(async move {
                let Ok(_thread) = threads.acquire().await else {
                    return;
                };
                let _ = tokio::task::spawn_blocking(move || run(&s, job)).await;
            });
            continue;
        }
        let client = job.client();
        let mut waiting = queues.lock();
        if let Some(queue) = waiting.get_mut(&client) {
            if queue.len() < MAX_QUEUED_PER_CLIENT {
                queue.push_back(job);
            } else {
                if let Job::Granted(g) = &job {
                    service.granting.done(g);
                }
                service
                    .counters
                    .callbacks_dropped
                    .fetch_add(1, Ordering::Relaxed);
                if service.callback_warning.due() {
                    warn!(%client, queued = MAX_QUEUED_PER_CLIENT,
                        "NLM: dropping a call to the client (GRANTED or a _MSG's result): \
                         as many are waiting for the calls to it in progress as may \
                         (repeats are not logged for 10 s)");
                }
            }
            continue;
        }
        waiting.insert(client, VecDeque::from([job]));
        drop(waiting);
        tokio::spawn(call_client(
            service.clone(),
            queues.clone(),
            threads.clone(),
            client,
        ));
    }
}

/// Makes the calls queued for `client`, one after the other, until none
/// is left.
async fn call_client(
    service: Arc<LockService>,
    queues: ClientQueues,
    threads: Arc<tokio::sync::Semaphore>,
    client: IpAddr,
) {
    loop {
        let Ok(_thread) = threads.acquire().await else {
            return;
        };
        let job = {
            let mut waiting = queues.lock();
            let next = waiting.get_mut(&client).and_then(VecDeque::pop_front);
            if next.is_none() {
                waiting.remove(&client);
            }
            next
        };
        let Some(job) = job else {
            return;
        };
        let s = service.clone();
        let _ = tokio::task::spawn_blocking(move || run(&s, job)).await;
    }
}

/// Makes one call (blocking).
fn run(service: &LockService, job: Job) {
    match job {
        Job::Granted(g) => {
            service.call_granted(&g);
            service.granting.done(&g);
        }
        Job::Res {
            peer,
            proc_,
            results,
        } => {
            let r = client::call(peer, NLM_PROGRAM, NLM_V4, proc_ as u32, &results, false);
            if let Err(e) = r {
                service
                    .counters
                    .callbacks_failed
                    .fetch_add(1, Ordering::Relaxed);
                // Named as RFC 1813's NLM chapter names it (LOCK_RES...).
                let procedure = super::procedures::NLM
                    .procedure(proc_ as u32)
                    .map_or("?", |p| p.name);
                warn!(client = %peer.client, error = %e, procedure,
                    "NLM: cannot send a result to the client");
            }
        }
        Job::Notify { host, state } => reboot::notify(&host, state),
    }
}
