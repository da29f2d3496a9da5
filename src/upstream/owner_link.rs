//! `[cluster]`: what a connection to another replica's session endpoint is given (see
//! `owners`): how owners and replicas are found and passes made ([`OwnerRoutes`], handed in by the
//! composition), and the owner and session one connection serves ([`OwnerLink`]).

use std::sync::Arc;

use http::{HeaderName, HeaderValue};

use crate::host::{HostSession, SubjectToken};

/// The replica holding a session, when another one than this.
pub type OwnerOf = Arc<dyn Fn(&Whose<'_>) -> Option<OwnerAt> + Send + Sync>;

/// Another replica alive, by its id.
pub type ReplicaAt = Arc<dyn Fn(&str) -> Option<OwnerAt> + Send + Sync>;

/// A fresh pass for one request to a replica, for a session, carrying what it carries.
pub type MakePass = Arc<dyn Fn(&str, &Whose<'_>, &Carried<'_>) -> String + Send + Sync>;

/// How another replica's sessions are reached, handed in by the composition.
#[derive(Clone)]
pub struct OwnerRoutes {
    /// The replica holding `whose` session, when another one than this.
    pub owner_of: OwnerOf,
    /// Another replica alive, by its id (the one a call waits on, which its `requestState`
    /// names).
    pub replica_at: ReplicaAt,
    /// A fresh pass for one request to replica `to` for `whose` session, carrying `carried`.
    pub pass: MakePass,
    /// The client between replicas (HTTP/2, with `peer_tls` over TLS).
    pub client: reqwest::Client,
    /// The session endpoint's route and the header of its pass.
    pub path: &'static str,
    pub header: &'static str,
}

/// Whose session a request is for.
#[derive(Debug, Clone, Copy)]
pub struct Whose<'a> {
    pub upstream: &'a str,
    pub principal: &'a str,
    /// A per-host upstream's host session (none: the principal's session).
    pub host: Option<HostSession>,
}

/// The replica holding a session: its id and the base URL of its MCP listener.
#[derive(Debug, Clone)]
pub struct OwnerAt {
    pub replica: String,
    pub url: String,
}

/// What one request's pass carries besides whose it is.
#[derive(Debug, Default, Clone, Copy)]
pub struct Carried<'a> {
    /// The JWT the host's request came with (the owner exchanges it for the upstream's token).
    pub subject: Option<&'a SubjectToken>,
    /// The key a 2025 host's call's answer is kept under at the owner, when that host's stream
    /// is lost with this replica.
    pub kept_as: Option<&'a str>,
}

/// The owner a connection goes to, and whose session it serves there.
#[derive(Clone)]
pub(crate) struct OwnerLink {
    routes: OwnerRoutes,
    pub(super) replica: Arc<str>,
    upstream: Arc<str>,
    principal: Arc<str>,
    host: Option<HostSession>,
}

impl OwnerLink {
    /// The link to replica `replica` for `whose` session.
    pub(super) fn new(routes: OwnerRoutes, replica: Arc<str>, whose: Whose<'_>) -> Self {
        let (upstream, principal) = (whose.upstream.into(), whose.principal.into());
        OwnerLink { routes, replica, upstream, principal, host: whose.host }
    }

    /// The pass header of one request carrying `carried`.
    pub(super) fn pass(&self, carried: &Carried<'_>) -> Option<(HeaderName, HeaderValue)> {
        let whose = Whose { upstream: &self.upstream, principal: &self.principal, host: self.host };
        let pass = (self.routes.pass)(&self.replica, &whose, carried);
        Some((HeaderName::from_static(self.routes.header), HeaderValue::from_str(&pass).ok()?))
    }

    pub(super) fn client(&self) -> reqwest::Client {
        self.routes.client.clone()
    }
}
