//! The state of one import in progress: what is decided so far for every entry, the problems
//! and notes found on the way. Each step (`entry`, `secrets`, `vars`) works on it.

use std::collections::{BTreeMap, BTreeSet};

use super::{Import, ImportError, ImportedUpstream, Note, Origin};
use crate::problem::Problem;

/// VS Code `inputs`: id → its description.
pub(super) type Inputs = BTreeMap<String, String>;

/// The import in progress: what is decided so far for every entry.
pub(super) struct State<'a> {
    pub(super) origin: &'a Origin,
    pub(super) inputs: Inputs,
    pub(super) notes: Vec<Note>,
    pub(super) problems: Vec<Problem>,
    pub(super) variables: BTreeSet<String>,
    /// Every variable a moved secret was given, with the value it stands for (only to tell two
    /// different secrets of the same name apart; never written).
    pub(super) secret_values: BTreeMap<String, String>,
    /// The entry being imported.
    pub(super) current: String,
    pub(super) upstreams: Vec<ImportedUpstream>,
    pub(super) names: BTreeSet<String>,
}

impl<'a> State<'a> {
    pub(super) fn new(origin: &'a Origin, inputs: Inputs) -> Self {
        State {
            origin,
            inputs,
            notes: Vec::new(),
            problems: Vec::new(),
            variables: BTreeSet::new(),
            secret_values: BTreeMap::new(),
            current: String::new(),
            upstreams: Vec::new(),
            names: BTreeSet::new(),
        }
    }

    pub(super) fn finish(self) -> Result<Import, ImportError> {
        if !self.problems.is_empty() {
            return Err(ImportError { problems: self.problems, notes: self.notes });
        }
        if self.upstreams.is_empty() {
            let problem = Problem::new("file", "no server could be imported (see the notes above)");
            return Err(ImportError { problems: vec![problem], notes: self.notes });
        }
        Ok(Import { upstreams: self.upstreams, notes: self.notes, variables: self.variables })
    }

    pub(super) fn problem(&mut self, at: &str, message: &str) {
        self.problems.push(Problem::new(at, message));
    }

    pub(super) fn note(&mut self, entry: &str, message: &str) {
        self.notes.push(Note { entry: entry.to_string(), message: message.to_string() });
    }
}
