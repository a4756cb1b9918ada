//! Shaping a chat answer: the reasoning split off (templates that think), then tool calls
//! parsed out of what remains (requests with tools). A streamed answer is shaped piece by
//! piece ([`AnswerShape::stream`]); a whole one is the fold of the same pieces
//! ([`AnswerShape::apply`]), so the two always agree.

use crate::answer_stream::{AnswerStream, Piece};
use crate::protocol::chat::{FunctionCall, ToolCall};
use crate::tools::ToolPlan;

/// How a request's answers are shaped; the default shapes nothing.
#[derive(Clone, Debug, Default)]
pub struct AnswerShape {
    pub reasoning: bool,
    /// The rendered prompt ends inside an open `<think>` block.
    pub opened_in_prompt: bool,
    pub tools: Option<ToolPlan>,
}

/// One answer, shaped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shaped {
    pub reasoning: Option<String>,
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
}

impl AnswerShape {
    /// Whether answers go through an [`AnswerStream`] (else their text is the content as is).
    pub fn is_active(&self) -> bool {
        self.reasoning || self.tools.is_some()
    }

    pub fn stream(&self) -> AnswerStream {
        AnswerStream::new(
            self.reasoning,
            self.opened_in_prompt,
            self.tools.as_ref().map(|t| t.format),
        )
    }

    pub fn apply(&self, text: &str) -> Shaped {
        let mut stream = self.stream();
        let mut pieces = stream.push(text);
        pieces.extend(stream.finish());
        fold(pieces, stream.thought())
    }
}

/// The message the pieces of one answer make; `thought`: it had a reasoning block.
fn fold(pieces: Vec<Piece>, thought: bool) -> Shaped {
    let mut reasoning = thought.then(String::new);
    let mut content = String::new();
    let mut tool_calls: Vec<ToolCall> = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Reasoning(t) => reasoning.get_or_insert_with(String::new).push_str(&t),
            Piece::Content(t) => content.push_str(&t),
            Piece::CallStart { id, name, .. } => tool_calls.push(ToolCall {
                id,
                kind: "function",
                function: FunctionCall {
                    name,
                    arguments: String::new(),
                },
            }),
            Piece::CallArguments { index, text } => {
                if let Some(call) = tool_calls.get_mut(index) {
                    call.function.arguments.push_str(&text);
                }
            }
        }
    }
    // An answer that is only calls has no content (null), as OpenAI sends it.
    let content = (!content.is_empty() || tool_calls.is_empty()).then_some(content);
    Shaped {
        reasoning,
        content,
        tool_calls,
    }
}
