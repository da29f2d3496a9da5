//! The one way a host is told a list changed, for every list (resources with templates, tools,
//! prompts): what each principal sees of a list is condensed to a digest ([`ViewDigest`]: every
//! visible entry whole, as a host would be sent it, in list order), and a host hears the list's
//! `list_changed` when its principal's digest differs from the one it last heard of (or
//! registered with): a resource or tool only bob may see appearing tells alice nothing.
//! [`Fanout::tell_changed`] decides it; a digest is computed at most once per principal and
//! list per (catalog generation, policy set) ([`ViewMemo`]) and shared by every host of that
//! principal.
//!
//! Invariant: equal digests mean equal visible lists, up to 64-bit hash collisions.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher};
use std::sync::Mutex;

#[cfg(doc)]
use super::Fanout;
use super::{Outgoing, OutletInfo};

/// A list a host may hear changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Listing {
    /// Resources and templates: `notifications/resources/list_changed`.
    Resources,
    Tools,
    Prompts,
}

/// The digests of the lists a host has heard of, one per [`Listing`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen([u64; 3]);

/// A digest of what a principal sees of one list.
#[derive(Default)]
pub struct ViewDigest(DefaultHasher);

/// The digests computed per principal and list, each with what it was computed from (`K`).
pub struct ViewMemo<K> {
    memo: Mutex<HashMap<(String, Listing), (K, u64)>>,
}

impl Listing {
    /// Does this host hear this list's `list_changed`?
    pub fn wanted_by(self, info: &OutletInfo) -> bool {
        match self {
            Listing::Resources => info.wants_list_changed,
            Listing::Tools => info.wants_tools_list_changed,
            Listing::Prompts => info.wants_prompts_list_changed,
        }
    }

    /// The notification that tells a host this list changed.
    pub fn news(self) -> Outgoing {
        match self {
            Listing::Resources => Outgoing::ListChanged,
            Listing::Tools => Outgoing::ToolsListChanged,
            Listing::Prompts => Outgoing::PromptsListChanged,
        }
    }
}

impl Seen {
    /// The digests a host registers with: `digest` of each list it hears of (the rest 0).
    pub fn of(info: &OutletInfo, digest: impl Fn(Listing) -> u64) -> Seen {
        let lists = [Listing::Resources, Listing::Tools, Listing::Prompts];
        Seen(lists.map(|listing| if listing.wanted_by(info) { digest(listing) } else { 0 }))
    }

    pub(super) fn get_mut(&mut self, listing: Listing) -> &mut u64 {
        &mut self.0[listing as usize]
    }
}

impl ViewDigest {
    /// Add an entry through its JSON form (what a host would be sent); `kind` tells apart the
    /// kinds of one list (a resource from a template).
    pub fn add(&mut self, kind: u8, entry: &impl serde::Serialize) {
        self.0.write_u8(kind);
        // Writing into a hasher cannot fail; an entry that cannot be serialised is not listed either.
        let _ = serde_json::to_writer(HashWriter(&mut self.0), entry);
    }

    pub fn finish(self) -> u64 {
        self.0.finish()
    }
}

impl<K> Default for ViewMemo<K> {
    fn default() -> Self {
        ViewMemo { memo: Mutex::new(HashMap::new()) }
    }
}

impl<K> ViewMemo<K> {
    /// `principal`'s digest of `listing`: the one kept while `fresh` holds for what it was
    /// computed from, else `compute`d (with what it is computed from) and kept.
    pub fn digest(
        &self,
        (principal, listing): (&str, Listing),
        fresh: impl Fn(&K) -> bool,
        compute: impl FnOnce() -> (K, u64),
    ) -> u64 {
        let key = (principal.to_string(), listing);
        if let Some((_, digest)) = self.memo.lock().expect("views lock").get(&key).filter(|(from, _)| fresh(from)) {
            return *digest;
        }
        let (from, digest) = compute();
        self.memo.lock().expect("views lock").insert(key, (from, digest));
        digest
    }
}

struct HashWriter<'a>(&'a mut DefaultHasher);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
