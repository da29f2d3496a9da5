//! The lists capability: pages of the merged resource and template lists, cut from the
//! catalog's immutable snapshot (no upstream call per page), filtered by the caller's policy
//! snapshot, with authenticated cursors bound to the principal and the catalog generation.

use std::sync::Arc;

use rmcp::model::{ListResourceTemplatesResult, ListResourcesResult};

use super::caller::Caller;
use super::core::Core;
use crate::catalog::Snapshot;
use crate::cursor::ListKind;
use crate::error::ProxyError;

/// The lists service.
#[derive(Clone)]
pub struct Lists {
    core: Arc<Core>,
}

impl Lists {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    /// One page of the merged resource list.
    pub fn resources(&self, caller: &Caller, cursor: Option<&str>) -> Result<ListResourcesResult, ProxyError> {
        let snapshot = self.core.catalog.snapshot();
        let offset = self.offset(caller, ListKind::Resources, cursor, &snapshot)?;
        let page_size = self.core.config.server.page_size;
        let page = snapshot.resources_page(offset, page_size, &|uri| self.core.access.listable(caller, uri));
        let mut result = ListResourcesResult::with_all_items(page.items);
        result.next_cursor = page.next.map(|next| self.cursor(caller, ListKind::Resources, &snapshot, next));
        Ok(result)
    }

    /// One page of the merged template list.
    pub fn templates(&self, caller: &Caller, cursor: Option<&str>) -> Result<ListResourceTemplatesResult, ProxyError> {
        let snapshot = self.core.catalog.snapshot();
        let offset = self.offset(caller, ListKind::Templates, cursor, &snapshot)?;
        let page_size = self.core.config.server.page_size;
        let page = snapshot.templates_page(offset, page_size, &|template| caller.may_see_template(template));
        let mut result = ListResourceTemplatesResult::with_all_items(page.items);
        result.next_cursor = page.next.map(|next| self.cursor(caller, ListKind::Templates, &snapshot, next));
        Ok(result)
    }

    fn offset(
        &self,
        caller: &Caller,
        list: ListKind,
        cursor: Option<&str>,
        snapshot: &Snapshot,
    ) -> Result<usize, ProxyError> {
        let key = &self.core.cursor_key;
        key.page_start(caller.principal(), list, snapshot.generation, cursor).map_err(|_| ProxyError::InvalidCursor)
    }

    fn cursor(&self, caller: &Caller, list: ListKind, snapshot: &Snapshot, offset: usize) -> String {
        self.core.cursor_key.page_cursor(caller.principal(), list, snapshot.generation, offset)
    }
}
