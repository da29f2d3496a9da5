//! The roots an upstream is given (`roots` in its config): answered by the proxy to the
//! upstream's `roots/list`, and changed in place by a config reload, which tells the connected
//! upstream `notifications/roots/list_changed`. The roots capability (with `listChanged`) is
//! declared to an upstream only when it has roots; roots are a 2025-era request (SEP-2577
//! deprecates them), so `protocol = "auto"` speaks the 2025 era to an upstream given roots when
//! it can (see `connect`).
//!
//! Invariant: an upstream sees only the roots its own config names, never a host's: it is
//! shared by every host.

#![allow(deprecated)] // Roots are deprecated by SEP-2577 but still in the 2025 era.

use std::sync::{Arc, Mutex};

use rmcp::model::{ListRootsResult, Root, RootsCapabilities};

/// A cheap handle on one upstream's current roots.
#[derive(Debug, Clone, Default)]
pub(crate) struct Roots {
    current: Arc<Mutex<Arc<Vec<String>>>>,
}

/// What [`crate::upstream::Connection::set_roots`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootsChange {
    /// The same roots as before: nothing to do.
    Unchanged,
    /// Changed in place; the upstream was told if it was connected.
    Changed,
    /// From none to some or back: the capability declared at connect differs, so the
    /// upstream must reconnect.
    NeedsReconnect,
}

impl Roots {
    pub fn new(roots: &[String]) -> Self {
        Self { current: Arc::new(Mutex::new(Arc::new(roots.to_vec()))) }
    }

    /// The roots' URIs as they are now.
    pub fn uris(&self) -> Arc<Vec<String>> {
        self.current.lock().expect("roots lock").clone()
    }

    /// The capability to declare: `roots { listChanged: true }` when there are roots.
    pub fn capability(&self) -> Option<RootsCapabilities> {
        (!self.uris().is_empty()).then(|| {
            let mut capability = RootsCapabilities::default();
            capability.list_changed = Some(true);
            capability
        })
    }

    /// The answer to `roots/list`.
    pub fn list(&self) -> ListRootsResult {
        ListRootsResult::new(self.uris().iter().map(|uri| Root::new(uri.as_str())).collect())
    }

    /// Replace the roots; what that means for the connection.
    pub fn replace(&self, next: &[String]) -> RootsChange {
        let mut current = self.current.lock().expect("roots lock");
        if current.as_slice() == next {
            return RootsChange::Unchanged;
        }
        let change = match current.is_empty() == next.is_empty() {
            true => RootsChange::Changed,
            false => RootsChange::NeedsReconnect,
        };
        *current = Arc::new(next.to_vec());
        change
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_between_some_roots_is_in_place_and_to_or_from_none_reconnects() {
        let roots = Roots::new(&["file:///a".into()]);
        assert_eq!(roots.replace(&["file:///a".into()]), RootsChange::Unchanged);
        assert_eq!(roots.replace(&["file:///b".into()]), RootsChange::Changed);
        assert_eq!(roots.list().roots.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>(), ["file:///b"]);
        assert_eq!(roots.replace(&[]), RootsChange::NeedsReconnect);
        assert!(roots.capability().is_none());
        assert_eq!(roots.replace(&["file:///c".into()]), RootsChange::NeedsReconnect);
        assert_eq!(roots.capability().and_then(|c| c.list_changed), Some(true));
    }
}
