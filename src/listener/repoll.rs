//! A connection's future polled again in place when it wakes itself while being polled.
//!
//! hyper's HTTP/1.1 dispatcher and the service it drives run in one task, and hyper's body
//! channel wakes its sender every time the receiver takes a chunk: reading a request body
//! (the fast path collecting it) wakes the connection's own task from inside its poll. tokio
//! treats a task woken during its own poll as a yield: the task goes to the back of the run
//! queue and an idle worker is woken to steal it — a futex wake, and that worker's spin and
//! park again, on every request. [`Repoll`] catches those wakes: one that arrives while the
//! inner future is being polled only marks it to be polled again, at most [`REPOLLS`] times
//! in one poll; past that, or when the task's cooperative budget is spent, it yields to the
//! scheduler as before. Wakes from elsewhere (the I/O driver, other tasks, timers) reach the
//! task's waker as usual.
//!
//! Invariants:
//! - no wake is lost: a wake during a poll is seen by the poller after that poll (the state
//!   word is swapped), and any other wake goes to the waker registered by the latest poll;
//! - fairness is tokio's: a future that keeps waking itself yields after [`REPOLLS`] polls.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Polls of the inner future in one poll of [`Repoll`] before a self-wake yields.
pub(crate) const REPOLLS: usize = 4;

const POLLING: u8 = 1;
const WOKEN: u8 = 2;

/// `inner`, re-polled in place on self-wakes.
pub(crate) struct Repoll<F> {
    inner: Pin<Box<F>>,
    signal: Arc<Signal>,
    waker: Waker,
}

impl<F: Future> Repoll<F> {
    pub(crate) fn new(inner: F) -> Self {
        let signal = Arc::new(Signal { state: AtomicU8::new(0), task: AtomicWaker::new() });
        let waker = Waker::from(signal.clone());
        Self { inner: Box::pin(inner), signal, waker }
    }
}

impl<F: Future> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.signal.task.register(cx.waker());
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..REPOLLS {
            this.signal.state.store(POLLING, Ordering::Release);
            if let Poll::Ready(output) = this.inner.as_mut().poll(&mut inner_cx) {
                this.signal.state.store(0, Ordering::Release);
                return Poll::Ready(output);
            }
            let woken = this.signal.state.swap(0, Ordering::AcqRel) & WOKEN != 0;
            if !woken {
                return Poll::Pending;
            }
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
        }
        // Still woken: yield to the scheduler, as the inner future's own wake would have.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// The waker the inner future sees.
struct Signal {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.state.fetch_or(WOKEN, Ordering::AcqRel) & POLLING == 0 {
            self.task.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts the wakes of the task that polls [`Repoll`].
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Wakes itself on its first `selfish` polls, then is ready; counts its polls.
    struct SelfWaking {
        selfish: usize,
        polls: usize,
    }

    impl Future for SelfWaking {
        type Output = usize;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.polls <= self.selfish {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(self.polls)
        }
    }

    fn poll_once<F: Future>(future: &mut Repoll<F>, count: &Arc<Count>) -> Poll<F::Output> {
        let waker = Waker::from(count.clone());
        Pin::new(future).poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_self_wake_is_polled_again_in_place_without_waking_the_task() {
        let count = Arc::new(Count::default());
        let mut future = Repoll::new(SelfWaking { selfish: 1, polls: 0 });
        assert_eq!(poll_once(&mut future, &count), Poll::Ready(2));
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_after_the_bound() {
        let count = Arc::new(Count::default());
        let mut future = Repoll::new(SelfWaking { selfish: REPOLLS + 1, polls: 0 });
        assert_eq!(poll_once(&mut future, &count), Poll::Pending);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the task is woken to run again later");
        assert_eq!(poll_once(&mut future, &count), Poll::Ready(REPOLLS + 2));
    }

    #[test]
    fn a_wake_between_polls_reaches_the_task() {
        let count = Arc::new(Count::default());
        let (sender, receiver) = tokio::sync::oneshot::channel::<u8>();
        let mut future = Repoll::new(receiver);
        assert!(poll_once(&mut future, &count).is_pending());
        sender.send(7).expect("receiver alive");
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(poll_once(&mut future, &count), Poll::Ready(Ok(7)));
    }

    #[test]
    fn a_wake_from_another_thread_during_a_poll_is_not_lost() {
        // The inner future hands its waker to a thread that wakes it while the poll is still
        // running; the poll must see it and poll again.
        struct WakeFromElsewhere {
            polls: usize,
        }
        impl Future for WakeFromElsewhere {
            type Output = usize;
            fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
                self.polls += 1;
                if self.polls == 1 {
                    let waker = cx.waker().clone();
                    std::thread::spawn(move || waker.wake()).join().expect("waking thread");
                    return Poll::Pending;
                }
                Poll::Ready(self.polls)
            }
        }
        let count = Arc::new(Count::default());
        let mut future = Repoll::new(WakeFromElsewhere { polls: 0 });
        assert_eq!(poll_once(&mut future, &count), Poll::Ready(2));
    }
}
