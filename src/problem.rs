//! One problem found while validating input an operator wrote (the config file, a policy file,
//! a CA file): where it is and what is wrong. Validation collects every problem before it
//! answers, so an operator sees all of them at once; config and policy both report in this
//! form, which is why it lives below both.

use std::fmt;

/// One problem: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub at: String,
    pub message: String,
}

impl Problem {
    pub fn new(at: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem { at: at.into(), message: message.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}
