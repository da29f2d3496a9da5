//! A stdio host whose proxy cannot serve (its configuration has problems: a variable not set, a
//! file missing) is told why, as MCP: every request it sends — `initialize`, `server/discover`,
//! anything after — is answered with one JSON-RPC error whose message names every problem, until
//! the host closes stdin. Without this the host sees only "connection closed".
//!
//! Invariant: nothing but JSON-RPC responses goes to stdout; notifications and lines that are
//! not JSON-RPC requests get no answer.

use rmcp::model::ErrorCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Answer every request on stdin with an error saying the proxy cannot serve because of
/// `problems` (each `at: message`), until stdin ends.
pub async fn refuse_stdio(problems: &[String]) -> std::io::Result<()> {
    let reply = refusal(problems);
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    while let Some(line) = lines.next_line().await? {
        if let Some(answer) = answer(&line, &reply) {
            stdout.write_all(answer.as_bytes()).await?;
            stdout.write_all(b"\n").await?;
            stdout.flush().await?;
        }
    }
    Ok(())
}

/// The error every request gets.
fn refusal(problems: &[String]) -> Value {
    let count = problems.len();
    let plural = if count == 1 { "" } else { "s" };
    let message = format!(
        "mcp-resource-proxy cannot serve: {count} configuration problem{plural}: {} (fix it, then restart the host)",
        problems.join("; ")
    );
    json!({"code": ErrorCode::INTERNAL_ERROR.0, "message": message, "data": {"problems": problems}})
}

/// The answer to one line: an error response for a request (a message with a `method` and an
/// `id`), nothing for anything else.
fn answer(line: &str, error: &Value) -> Option<String> {
    let message: Value = serde_json::from_str(line).ok()?;
    let id = message.get("id").filter(|id| id.is_string() || id.is_number())?;
    message.get("method")?;
    Some(json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    fn check(line: &str, expected: Option<serde_json::Value>) {
        let error = json!({"code": -32603, "message": "m"});
        let answer = super::answer(line, &error).map(|a| serde_json::from_str::<serde_json::Value>(&a).unwrap());
        assert_eq!(answer, expected, "{line}");
    }

    #[test]
    fn requests_get_the_error_and_nothing_else_gets_an_answer() {
        let error = json!({"code": -32603, "message": "m"});
        check(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            Some(json!({"jsonrpc": "2.0", "id": 1, "error": error})),
        );
        check(
            r#"{"jsonrpc":"2.0","id":"a","method":"server/discover"}"#,
            Some(json!({"jsonrpc": "2.0", "id": "a", "error": error})),
        );
        check(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, None);
        check(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#, None);
        check("not json", None);
    }

    #[test]
    fn the_message_names_every_problem() {
        let refusal = super::refusal(&["a.b: x".to_string(), "c: y".to_string()]);
        let message = refusal["message"].as_str().unwrap();
        assert!(message.contains("2 configuration problems: a.b: x; c: y"), "{message}");
    }
}
