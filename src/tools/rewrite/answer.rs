//! A routed answer as the caller may see it: a tool result (content blocks, `_meta`,
//! `structuredContent`), a prompt's messages, completion values; what the caller may not read
//! is withheld, counted as a policy denial of a read, and logged the same way for every kind.

use rmcp::model::{CallToolResult, ContentBlock, GetPromptResult, ResultType};

use super::links::Links;
use super::structured::{Structured, structured_for};
use super::{block_for, blocks_for, completion_for, result_meta};
use crate::cluster::peers::Answer;
use crate::metrics::{DenialAction, Metrics};

/// `answer` from `links`' upstream as its caller may see it. A 2025-era upstream's result has
/// no `resultType`; 2026-07-28 hosts need it (rmcp clears it again for 2025 hosts).
pub(crate) fn answer_for(links: &Links<'_>, answer: Answer, metrics: &Metrics) -> Answer {
    let withheld = |what: &'static str, count: usize| {
        if count > 0 {
            metrics.policy_denied(DenialAction::Read, None);
            tracing::debug!(upstream = links.upstream(), principal = links.principal(), what, count, "withheld");
        }
    };
    match answer {
        Answer::Tool(result) => Answer::Tool(rewritten_call(links, result, withheld)),
        Answer::Prompt(result) => Answer::Prompt(rewritten_get(links, result, withheld)),
        Answer::Complete(mut result) => {
            let (completion, dropped) = completion_for(links, result.completion);
            withheld("completion values", dropped);
            result.completion = completion;
            result.meta = result_meta(links, result.meta);
            result.result_type = Some(ResultType::COMPLETE);
            Answer::Complete(result)
        }
        answer => answer,
    }
}

fn rewritten_call(
    links: &Links<'_>,
    mut result: CallToolResult,
    withheld: impl Fn(&'static str, usize),
) -> CallToolResult {
    let (content, dropped) = blocks_for(links, result.content);
    withheld("tool result blocks", dropped);
    result.content = content;
    result.meta = result_meta(links, result.meta);
    match structured_for(links, &mut result) {
        Structured::Passed => {}
        Structured::Rewritten { removed } => withheld("structuredContent values", removed),
        // The whole value names a resource the caller may not read: the result is a tool error.
        Structured::Withheld => withheld("structuredContent", 1),
    }
    result.result_type = Some(ResultType::COMPLETE);
    result
}

fn rewritten_get(
    links: &Links<'_>,
    mut result: GetPromptResult,
    withheld: impl Fn(&'static str, usize),
) -> GetPromptResult {
    let sent = result.messages.len();
    result.messages.retain_mut(|message| {
        let block = std::mem::replace(&mut message.content, ContentBlock::text(""));
        match block_for(links, block) {
            Some(block) => {
                message.content = block;
                true
            }
            None => false,
        }
    });
    withheld("prompt messages", sent - result.messages.len());
    result.meta = result_meta(links, result.meta);
    result.result_type = Some(ResultType::COMPLETE);
    result
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CompleteResult, CompletionInfo, PromptMessage, Resource, Role};

    use super::*;
    use crate::catalog::{Catalog, UpstreamCatalog};
    use crate::policy::PolicySet;

    /// The answer of each kind with one URI the caller may read and one it may not: one
    /// withheld, counted once as a denied read.
    #[test]
    fn what_is_withheld_from_any_kind_of_answer_is_counted_once() {
        let (public, secret) = ("py://doc/public/1", "py://doc/secret/1");
        let link = |uri: &str| ContentBlock::resource_link(Resource::new(uri, "doc"));
        let prompt = GetPromptResult::new(vec![
            PromptMessage::new(Role::User, link(public)),
            PromptMessage::new(Role::User, link(secret)),
        ]);
        let mut completion = CompletionInfo::default();
        completion.values = vec![public.to_string(), secret.to_string()];
        let answers = [
            ("tool", Answer::Tool(CallToolResult::success(vec![link(public), link(secret)]))),
            ("prompt", Answer::Prompt(prompt)),
            ("completion", Answer::Complete(CompleteResult::new(completion))),
        ];
        let catalog = Catalog::new();
        let docs = UpstreamCatalog { resources: vec![Resource::new("docs+py://doc/public/1", "p")], templates: vec![] };
        catalog.set_upstream("docs", docs);
        let text = "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"docs+py://doc/secret/**\"]\n";
        let policy = PolicySet::from_texts(&[("p.toml", text)]).expect("valid policy");
        let snapshot = catalog.snapshot();
        let links = Links::new("docs", &snapshot, &policy, "alice");
        for (kind, answer) in answers {
            let metrics = Metrics::new();
            let kept = match answer_for(&links, answer, &metrics) {
                Answer::Tool(result) => result.content.len(),
                Answer::Prompt(result) => result.messages.len(),
                Answer::Complete(result) => result.completion.values.len(),
                _ => 0,
            };
            assert_eq!(kept, 1, "{kind}: the readable URI is kept, the other withheld");
            let denials = metrics.render();
            let read = denials.lines().find(|line| line.starts_with("mcp_proxy_policy_denials_total{action=\"read\""));
            assert!(read.is_some_and(|line| line.ends_with(" 1")), "{kind}: counted once: {read:?}");
        }
    }
}
