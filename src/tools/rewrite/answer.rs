//! A routed answer as the caller may see it: a tool result (content blocks, `_meta`,
//! `structuredContent`), a prompt's messages, completion values; what the caller may not read
//! is withheld, counted as a policy denial of a read, and logged the same way for every kind.

use rmcp::model::{CallToolResult, ContentBlock, GetPromptResult, ResultType};

use super::links::Links;
use super::structured::{Structured, structured_for};
use super::{block_for, blocks_for, completion_for, result_meta};
use crate::cluster::forward::Answer;
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
        Answer::Tool(result) => Answer::Tool(tool_result_for(links, result, withheld)),
        Answer::Prompt(result) => Answer::Prompt(prompt_for(links, result, withheld)),
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

fn tool_result_for(
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

fn prompt_for(
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
