//! Request bodies on `/mcp`, guarded as they arrive: a body must arrive whole within
//! `server.body_read_timeout` of its request head, and the bodies one principal is sending at
//! once may hold at most `server.max_body_bytes_per_principal` bytes between them (a body
//! announcing more than is left is refused before a byte is read). A body cut either way is
//! counted (`mcp_proxy_request_bodies_cut_total{reason}`) and audited once as a refusal; the
//! request fails (400) and its connection closes, so a host that stalls its uploads holds
//! neither memory nor a connection past the deadline.
//!
//! Invariant: a principal's charge is what its guarded bodies read and have not yet finished
//! or dropped; it never exceeds the budget.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::CONTENT_LENGTH;
use hyper::body::Frame;
use tokio::time::Sleep;

/// A body announcing at most this is not charged to its principal's budget (its deadline
/// still holds): a stalled one holds next to nothing, and a plain request pays no lock.
const SMALL: usize = 64 * 1024;

use crate::audit::{Audit, Event};
use crate::metrics::Metrics;

/// The budgets of one listener: a cheap `Clone` handle.
#[derive(Clone)]
pub(super) struct BodyGuard {
    inner: Arc<Inner>,
}

struct Inner {
    timeout: Duration,
    budget: usize,
    charged: Mutex<HashMap<Arc<str>, usize>>,
    metrics: Metrics,
    audit: Audit,
}

/// Whether a guarded body was cut, known once the request is answered: the answer is then
/// the cut's own (`408` or `413`), not what the reader made of a failed body.
#[derive(Clone, Default)]
pub(super) struct Verdict(Arc<OnceLock<Cut>>);

impl Verdict {
    /// The answer to a request whose body was cut; `None` when it was not.
    pub fn answer(&self) -> Option<Response> {
        let text = match self.0.get()? {
            Cut::Timeout => (
                StatusCode::REQUEST_TIMEOUT,
                "Request Timeout: the body did not arrive within server.body_read_timeout",
            ),
            Cut::Budget => return Some(too_large()),
        };
        Some(text.into_response())
    }
}

/// Why a body was cut (a bounded label).
#[derive(Debug, Clone, Copy)]
enum Cut {
    Timeout,
    Budget,
}

impl Cut {
    fn label(self) -> &'static str {
        match self {
            Cut::Timeout => "body_timeout",
            Cut::Budget => "body_budget",
        }
    }
}

impl BodyGuard {
    pub fn new(timeout: Duration, budget: usize, metrics: Metrics, audit: Audit) -> BodyGuard {
        let inner = Inner { timeout, budget, charged: Mutex::default(), metrics, audit };
        BodyGuard { inner: Arc::new(inner) }
    }

    /// `request` of `principal` with its body guarded, and the verdict on it once answered; or
    /// the refusal, when the body it announces does not fit what is left of the principal's
    /// budget.
    pub fn guard(&self, principal: &str, request: Request) -> Result<(Request, Verdict), Box<Response>> {
        let verdict = Verdict::default();
        let announced: Option<usize> =
            request.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
        if announced == Some(0) || request.body().is_end_stream() {
            return Ok((request, verdict));
        }
        let principal: Arc<str> = principal.into();
        if let Some(announced) = announced
            && announced > self.inner.budget.saturating_sub(self.charged(&principal))
        {
            self.cut(&principal, Cut::Budget);
            return Err(Box::new(too_large()));
        }
        let (parts, body) = request.into_parts();
        let guarded = Guarded {
            inner: body,
            until: Instant::now() + self.inner.timeout,
            deadline: None,
            guard: self.clone(),
            principal,
            charged: announced.is_none_or(|announced| announced > SMALL),
            charge: 0,
            done: false,
            verdict: verdict.clone(),
        };
        Ok((Request::from_parts(parts, Body::new(guarded)), verdict))
    }

    fn charged(&self, principal: &str) -> usize {
        self.inner.charged.lock().expect("bodies lock").get(principal).copied().unwrap_or(0)
    }

    /// Charge `bytes` more to `principal`; false (nothing charged) past the budget.
    fn charge(&self, principal: &Arc<str>, bytes: usize) -> bool {
        let mut charged = self.inner.charged.lock().expect("bodies lock");
        let now = charged.entry(principal.clone()).or_default();
        if *now + bytes > self.inner.budget {
            return false;
        }
        *now += bytes;
        true
    }

    fn release(&self, principal: &str, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut charged = self.inner.charged.lock().expect("bodies lock");
        if let Some(now) = charged.get_mut(principal) {
            *now = now.saturating_sub(bytes);
            if *now == 0 {
                charged.remove(principal);
            }
        }
    }

    fn cut(&self, principal: &str, why: Cut) {
        tracing::debug!(reason = why.label(), "a request body was cut");
        self.inner.metrics.request_body_cut(why.label());
        self.inner.audit.record(Event::refused(why.label()).principal(principal));
    }
}

fn too_large() -> Response {
    let text =
        "Payload Too Large: this principal's request bodies in flight would exceed server.max_body_bytes_per_principal";
    (StatusCode::PAYLOAD_TOO_LARGE, text).into_response()
}

/// A body read against its deadline and its principal's budget.
struct Guarded {
    inner: Body,
    /// When it must have arrived whole.
    until: Instant,
    /// The timer, made the first time the body is waited for (a body already here when its
    /// request is served needs none).
    deadline: Option<Pin<Box<Sleep>>>,
    guard: BodyGuard,
    principal: Arc<str>,
    /// Whether what it reads is charged to its principal's budget (not for a small body).
    charged: bool,
    /// What this body charged so far.
    charge: usize,
    /// Ended, failed or cut: nothing more is read.
    done: bool,
    verdict: Verdict,
}

impl Guarded {
    fn finish(&mut self) {
        self.done = true;
        self.guard.release(&self.principal, std::mem::take(&mut self.charge));
    }

    fn cut(&mut self, why: Cut) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.guard.cut(&self.principal, why);
        let _ = self.verdict.0.set(why);
        self.finish();
        let text = match why {
            Cut::Timeout => "the request body did not arrive within server.body_read_timeout",
            Cut::Budget => "the principal's request bodies exceed server.max_body_bytes_per_principal",
        };
        Poll::Ready(Some(Err(axum::Error::new(std::io::Error::other(text)))))
    }
}

impl HttpBody for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if this.charged {
                    let bytes = frame.data_ref().map_or(0, Bytes::len);
                    if !this.guard.charge(&this.principal, bytes) {
                        return this.cut(Cut::Budget);
                    }
                    this.charge += bytes;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(end) => {
                this.finish();
                Poll::Ready(end)
            }
            Poll::Pending => match this
                .deadline
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(this.until)))
                .as_mut()
                .poll(cx)
            {
                Poll::Ready(()) => this.cut(Cut::Timeout),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.guard.release(&self.principal, self.charge);
    }
}
