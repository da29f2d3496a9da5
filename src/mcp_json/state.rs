//! The state of one import in progress: what is decided so far for every entry, the problems
//! and notes found on the way. Each step (`entry`, `secrets`, `vars`) works on it.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;

use super::{Import, ImportError, ImportedTransport, ImportedUpstream, MovedSecrets, Note, Origin, printable};
use crate::problem::Problem;

/// VS Code `inputs`: id → its description.
pub(super) type Inputs = BTreeMap<String, String>;

/// The import in progress: what is decided so far for every entry.
pub(super) struct State<'a> {
    pub(super) origin: &'a Origin,
    pub(super) inputs: Inputs,
    pub(super) notes: Vec<Note>,
    pub(super) problems: Vec<Problem>,
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
        let variables = self.upstreams.iter().flat_map(ImportedUpstream::strings).flat_map(references).collect();
        let secrets = MovedSecrets(self.secret_values);
        Ok(Import { upstreams: self.upstreams, notes: self.notes, variables, secrets })
    }

    /// A problem at `at`; control characters of the file's text in it are escaped.
    pub(super) fn problem(&mut self, at: &str, message: &str) {
        self.problems.push(Problem::new(printable(at), printable(message)));
    }

    /// A note on `entry`; control characters of the file's text in it are escaped.
    pub(super) fn note(&mut self, entry: &str, message: &str) {
        self.notes.push(Note { entry: printable(entry), message: printable(message), moved_secret: false });
    }

    /// A note on `entry` that a literal secret was moved to a variable.
    pub(super) fn note_moved_secret(&mut self, entry: &str, message: &str) {
        self.note(entry, message);
        if let Some(note) = self.notes.last_mut() {
            note.moved_secret = true;
        }
    }
}

impl ImportedUpstream {
    /// Every string written for it that the proxy expands (`args`, `env`, `url`, `headers`).
    fn strings(&self) -> Vec<&str> {
        match &self.transport {
            ImportedTransport::Command { args, env, .. } => {
                args.iter().chain(env.iter().map(|(_, value)| value)).map(String::as_str).collect()
            }
            ImportedTransport::Http { url, headers } => {
                std::iter::once(url).chain(headers.iter().map(|(_, value)| value)).map(String::as_str).collect()
            }
        }
    }
}

/// The names of the `${VAR}` references in `text`.
fn references(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let _ = crate::config::replace_vars(text, |name| {
        names.push(name.to_string());
        Ok::<_, Infallible>(String::new())
    });
    names
}
