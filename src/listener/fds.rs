//! The file-descriptor budget of the listeners. Each open connection holds a descriptor, and
//! so do upstreams (a stdio child's pipes, HTTP connections), the folder server (each file
//! read, each watch), the logs and the listeners themselves. When connections may take every
//! descriptor the process has, the rest fail with `EMFILE`: folder reads break and the admin
//! listener cannot accept, so `/status` stops answering.
//!
//! At start the proxy raises its soft `RLIMIT_NOFILE` to the hard limit, then derives its
//! connection caps from the limit in force: [`RESERVED_BASE`] plus [`RESERVED_PER_UPSTREAM`]
//! per upstream are kept out of them, the admin listener gets a share of its own (at least
//! [`ADMIN_MIN`]) and `/mcp` the rest — never more than `server.max_connections` each.
//!
//! Invariant: the two listeners' caps together leave the reserve free, whatever the limit.

use crate::config::ServerConfig;

/// Descriptors kept out of the connection caps whatever the upstreams: the runtime's own, logs,
/// the listeners, the config and policy watches, files the folder server has open.
pub const RESERVED_BASE: u64 = 128;
/// More per configured upstream: a stdio child's pipes, HTTP upstream connections, a folder's
/// watches and open files.
pub const RESERVED_PER_UPSTREAM: u64 = 16;
/// The admin listener's least share of connections (its share is 1/16 of what is left).
pub const ADMIN_MIN: u64 = 8;

/// What was chosen at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The soft limit in force (`None`: unlimited).
    pub limit: Option<u64>,
    /// Connections `/mcp` may hold.
    pub mcp: usize,
    /// Connections the admin listener may hold.
    pub admin: usize,
}

/// Raise the soft limit toward the hard one, derive the caps from the limit in force, lower
/// `server`'s caps to them and log what was chosen (at `info` when the limit lowered a cap).
pub fn settle(server: &mut ServerConfig, upstreams: usize) -> Budget {
    let (before, limit) = raise_soft_limit();
    let configured = server.max_connections;
    let budget = caps(limit, upstreams, configured);
    server.max_connections = budget.mcp;
    server.admin_max_connections = budget.admin;
    let shown = |limit: Option<u64>| limit.map_or("unlimited".to_string(), |n| n.to_string());
    let (fd_limit, fd_limit_before) = (shown(limit), shown(before));
    let message = "connection caps from the file descriptor limit";
    // Said at `info` only when the limit lowered a cap; a healthy start stays quiet.
    if budget.mcp < configured || budget.admin < configured {
        tracing::info!(%fd_limit, %fd_limit_before, max_connections = budget.mcp, admin_max_connections = budget.admin, "{message}");
    } else {
        tracing::debug!(%fd_limit, %fd_limit_before, max_connections = budget.mcp, admin_max_connections = budget.admin, "{message}");
    }
    budget
}

/// The caps under a soft limit of `limit` descriptors with `upstreams` upstreams, each at
/// most `configured`.
pub fn caps(limit: Option<u64>, upstreams: usize, configured: usize) -> Budget {
    let Some(limit) = limit else { return Budget { limit, mcp: configured, admin: configured } };
    let reserve = RESERVED_BASE + RESERVED_PER_UPSTREAM * upstreams as u64;
    let available = limit.saturating_sub(reserve);
    let admin = (available / 16).max(ADMIN_MIN).min(configured as u64);
    let mcp = available.saturating_sub(admin).max(1).min(configured as u64);
    Budget { limit: Some(limit), mcp: mcp as usize, admin: admin as usize }
}

/// (soft limit before, soft limit now): raised to the hard limit when it was lower.
fn raise_soft_limit() -> (Option<u64>, Option<u64>) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let current = getrlimit(Resource::Nofile);
    let before = current.current;
    if before.is_none() || before == current.maximum {
        return (before, before);
    }
    let raised = Rlimit { current: current.maximum, maximum: current.maximum };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => (before, getrlimit(Resource::Nofile).current),
        Err(error) => {
            tracing::warn!(error = %error, "cannot raise the file descriptor limit");
            (before, before)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(limit: Option<u64>, upstreams: usize, configured: usize, expected: (usize, usize)) {
        let budget = caps(limit, upstreams, configured);
        assert_eq!((budget.mcp, budget.admin), expected, "limit {limit:?}, {upstreams} upstreams, cap {configured}");
        if let Some(limit) = limit.filter(|l| *l > 1_000) {
            let reserve = RESERVED_BASE + RESERVED_PER_UPSTREAM * upstreams as u64;
            assert!((budget.mcp + budget.admin) as u64 + reserve <= limit, "the reserve stays free");
        }
    }

    #[test]
    fn caps_leave_the_reserve_and_an_admin_share_whatever_the_limit() {
        // The shipped unit's old default: soft 1024 with one upstream.
        check(Some(1024), 1, 1024, (825, 55));
        check(Some(1024), 10, 1024, (690, 46));
        check(Some(65_536), 4, 1024, (1024, 1024));
        check(None, 1, 1024, (1024, 1024));
        // Tiny limits still serve something.
        check(Some(100), 1, 1024, (1, 8));
        check(Some(4096), 0, 2, (2, 2));
    }
}
