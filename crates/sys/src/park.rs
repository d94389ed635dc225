//! Running a future on the calling thread, parked while it waits: for a
//! thread outside the runtime's workers (tokio's blocking pool, tests,
//! tools) that has work to finish and nothing else to do meanwhile.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// Polls `future` to its end on this thread, parking the thread whenever
/// it is pending; whatever wakes it unparks the thread. Needs no runtime
/// of its own: a tokio resource polled here finds the runtime through the
/// handle the thread already has (a blocking-pool thread has one), and
/// `Handle::block_on`'s entry into the runtime (a seed for its RNG from a
/// lock all threads share, the coop budget) is not paid.
pub fn run_here<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_future_woken_from_another_thread_finishes_here() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            tx.send(7).unwrap();
        });
        assert_eq!(run_here(rx), Ok(7));
        sender.join().unwrap();
    }
}
