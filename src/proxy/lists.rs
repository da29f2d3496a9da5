//! The lists capability: pages of the merged resource and template lists, cut from the
//! catalog's immutable snapshot (no upstream call per page), filtered by the caller's policy
//! snapshot, with authenticated cursors bound to the principal and the catalog generation.
//! The entries' `icons` are judged with the same policy snapshot (`crate::tools::ListedIcons`:
//! one the caller may not read is dropped), only on entries that have icons.

use rmcp::model::{ListResourceTemplatesResult, ListResourcesResult, Resource, ResourceTemplate};

use super::access::Access;
use super::caller::Caller;
use crate::catalog::Catalog;
use crate::cursor::{CursorKey, ListKind};
use crate::error::ProxyError;
use crate::tools::ListedIcons;

/// The lists service, with what it uses.
pub(crate) struct Lists {
    pub(super) catalog: Catalog,
    /// Counts the list entries a caller may not see.
    pub(super) access: Access,
    pub(super) cursor_key: CursorKey,
    /// `server.page_size`.
    pub(super) page_size: usize,
}

impl Lists {
    /// One page of the merged resource list.
    pub(crate) fn resources(&self, caller: &Caller, cursor: Option<&str>) -> Result<ListResourcesResult, ProxyError> {
        let snapshot = self.catalog.snapshot();
        let list = (caller.principal(), ListKind::Resources);
        let visible = |resource: &Resource| self.access.listable(caller, &resource.uri);
        let page = snapshot.page_for(&self.cursor_key, list, (cursor, self.page_size), |p| &p.resources, visible)?;
        let mut icons = ListedIcons::new(&snapshot, caller.policy(), caller.principal());
        let listed = |mut resource: Resource| {
            resource.icons = icons.icons(&resource.uri, resource.icons.take());
            resource
        };
        let mut result = ListResourcesResult::with_all_items(page.items.into_iter().map(listed).collect());
        result.next_cursor = page.next_cursor;
        Ok(result)
    }

    /// One page of the merged template list.
    pub(crate) fn templates(
        &self,
        caller: &Caller,
        cursor: Option<&str>,
    ) -> Result<ListResourceTemplatesResult, ProxyError> {
        let snapshot = self.catalog.snapshot();
        let list = (caller.principal(), ListKind::Templates);
        let visible = |template: &ResourceTemplate| caller.may_see_template(template);
        let page = snapshot.page_for(&self.cursor_key, list, (cursor, self.page_size), |p| &p.templates, visible)?;
        let mut icons = ListedIcons::new(&snapshot, caller.policy(), caller.principal());
        let listed = |mut template: ResourceTemplate| {
            template.icons = icons.icons(&template.uri_template, template.icons.take());
            template
        };
        let mut result = ListResourceTemplatesResult::with_all_items(page.items.into_iter().map(listed).collect());
        result.next_cursor = page.next_cursor;
        Ok(result)
    }
}
