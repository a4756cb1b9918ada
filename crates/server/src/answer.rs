//! Shaping a finished chat answer: the reasoning split off (templates that think), then tool
//! calls parsed out of what remains (requests with tools).

use crate::protocol::chat::ToolCall;
use crate::reasoning;
use crate::tools::ToolPlan;

/// How a request's answers are shaped; the default shapes nothing.
#[derive(Clone, Debug, Default)]
pub struct AnswerShape {
    pub reasoning: bool,
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
    /// Whether answers need the whole text before they can be shaped (streams hold them).
    pub fn is_active(&self) -> bool {
        self.reasoning || self.tools.is_some()
    }

    pub fn apply(&self, text: &str) -> Shaped {
        let (reasoning, rest) = if self.reasoning {
            reasoning::split(text)
        } else {
            (None, text.to_string())
        };
        let (content, tool_calls) = match &self.tools {
            Some(plan) => plan.parse_output(&rest),
            None => (Some(rest), Vec::new()),
        };
        Shaped {
            reasoning,
            content,
            tool_calls,
        }
    }
}
