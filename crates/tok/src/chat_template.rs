//! [`ChatTemplate`]: renders a model's own Jinja chat template (GGUF `tokenizer.chat_template`,
//! `tokenizer_config.json` or `chat_template.jinja`) over OpenAI-style messages with `minijinja`,
//! the way Hugging Face `apply_chat_template` does.
//!
//! The environment matches transformers': `trim_blocks` and `lstrip_blocks` on, Python string
//! and dict methods (`.strip()`, `.items()`, ...) through `minijinja-contrib`'s pycompat layer,
//! `tojson`, loop controls, `raise_exception(msg)` and `strftime_now(fmt)`. The context holds
//! `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, `tools` when given, and any
//! extra `chat_template_kwargs`, which cannot replace the reserved names.

mod strftime;

use minijinja::value::Serde;
use minijinja::{Environment, Error, ErrorKind, Value};
use serde_json::{Map, Value as Json};

use crate::Tokenizer;

const TEMPLATE_NAME: &str = "chat_template";
/// Marks errors raised by the template itself, so their message is passed on unchanged.
const RAISED: &str = "raise_exception: ";

/// Why a chat template could not be loaded or rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template source does not compile (a problem of the model file).
    #[error("the model's chat template does not compile: {0}")]
    Invalid(String),
    /// The template called `raise_exception` (usually: messages it does not accept).
    #[error("{0}")]
    Raised(String),
    /// Rendering failed, e.g. a message lacks a field the template reads.
    #[error("rendering the chat template failed: {0}")]
    Render(String),
}

/// What a chat template is rendered over, besides the fixed special tokens.
#[derive(Debug, Clone, Copy)]
pub struct ChatTemplateInputs<'a> {
    /// OpenAI-style messages (`[{"role": ..., "content": ...}, ...]`).
    pub messages: &'a Json,
    /// End with the header of an assistant turn.
    pub add_generation_prompt: bool,
    /// Tool definitions, passed to the template as `tools`.
    pub tools: Option<&'a Json>,
    /// Extra variables (`chat_template_kwargs`).
    pub kwargs: Option<&'a Map<String, Json>>,
}

/// A compiled chat template with the model's BOS/EOS token strings.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token`/`eos_token` are the strings the template sees.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ChatTemplateError> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| ChatTemplateError::Invalid(e.to_string()))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("{RAISED}{msg}"),
            ))
        });
        env.add_function("strftime_now", |fmt: String| -> String {
            strftime::format_now_utc(&fmt)
        });
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| ChatTemplateError::Invalid(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// The tokenizer's own template with its BOS/EOS spellings; `None` if it has no template.
    pub fn from_tokenizer(tok: &Tokenizer) -> Option<Result<Self, ChatTemplateError>> {
        let source = tok.chat_template()?;
        let spell = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i)).unwrap_or_default();
        let bos = spell(tok.bos_id());
        let eos = spell(tok.eos_ids().first().copied());
        Some(Self::new(source, &bos, &eos))
    }

    /// Renders the prompt text for `inputs`.
    pub fn render(&self, inputs: &ChatTemplateInputs<'_>) -> Result<String, ChatTemplateError> {
        let mut ctx: Map<String, Json> = inputs.kwargs.cloned().unwrap_or_default();
        ctx.insert("messages".into(), inputs.messages.clone());
        ctx.insert(
            "add_generation_prompt".into(),
            Json::Bool(inputs.add_generation_prompt),
        );
        ctx.insert("bos_token".into(), Json::String(self.bos_token.clone()));
        ctx.insert("eos_token".into(), Json::String(self.eos_token.clone()));
        if let Some(tools) = inputs.tools {
            ctx.insert("tools".into(), tools.clone());
        }
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatTemplateError::Invalid(e.to_string()))?;
        template
            .render(Value::from(Serde(Json::Object(ctx))))
            .map_err(classify)
    }
}

fn classify(e: Error) -> ChatTemplateError {
    let raised = std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
        .filter_map(|e| e.downcast_ref::<Error>())
        .find_map(|e| e.detail().and_then(|d| d.strip_prefix(RAISED)));
    match raised {
        Some(msg) => ChatTemplateError::Raised(msg.to_string()),
        // The kind and detail only: `Display` would add the template's internal name and line
        // ("in chat_template:4"), which mean nothing to a client.
        None => ChatTemplateError::Render(match e.detail() {
            Some(detail) => format!("{}: {detail}", e.kind()),
            None => e.kind().to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    fn render(t: &ChatTemplate, messages: Json, gen: bool) -> Result<String, ChatTemplateError> {
        t.render(&ChatTemplateInputs {
            messages: &messages,
            add_generation_prompt: gen,
            tools: None,
            kwargs: None,
        })
    }

    #[test]
    fn chatml_with_and_without_generation_prompt() {
        let t = ChatTemplate::new(CHATML, "<s>", "</s>").unwrap();
        let msgs =
            json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]);
        assert_eq!(
            render(&t, msgs.clone(), true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(!render(&t, msgs, false).unwrap().ends_with("assistant\n"));
    }

    #[test]
    fn special_tokens_kwargs_and_python_methods() {
        let src = "{{ bos_token }}{% for m in messages %}{{ m.content.strip() | upper }}{% endfor %}{% if enable_thinking is defined and not enable_thinking %}/no_think{% endif %}{{ eos_token }}";
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        let msgs = json!([{"role": "user", "content": "  hi  "}]);
        let kwargs: Map<String, Json> =
            serde_json::from_value(json!({"enable_thinking": false, "messages": "ignored"}))
                .unwrap();
        let out = t
            .render(&ChatTemplateInputs {
                messages: &msgs,
                add_generation_prompt: false,
                tools: None,
                kwargs: Some(&kwargs),
            })
            .unwrap();
        assert_eq!(out, "<s>HI/no_think</s>");
    }

    #[test]
    fn trim_and_lstrip_blocks_like_transformers() {
        let src = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let out = render(&t, json!([{"role": "user", "content": "a"}]), false).unwrap();
        assert_eq!(out, "[a]\n");
    }

    #[test]
    fn raise_exception_is_passed_on_and_bad_templates_are_errors() {
        let src = "{% if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with a user message') }}{% endif %}ok";
        let t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(
            render(&t, json!([{"role": "assistant", "content": "x"}]), true),
            Err(ChatTemplateError::Raised(
                "Conversations must start with a user message".into()
            ))
        );
        assert_eq!(
            render(&t, json!([{"role": "user", "content": "x"}]), true).unwrap(),
            "ok"
        );
        assert!(matches!(
            ChatTemplate::new("{% for %}", "", ""),
            Err(ChatTemplateError::Invalid(_))
        ));
        let t = ChatTemplate::new("{{ messages[0].content + 1 }}", "", "").unwrap();
        assert!(matches!(
            render(&t, json!([{"role": "user", "content": "x"}]), true),
            Err(ChatTemplateError::Render(_))
        ));
    }

    #[test]
    fn strftime_now_and_loop_controls() {
        let t = ChatTemplate::new(
            "{{ strftime_now('%Y') | length }}{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}{{ messages | tojson }}",
            "",
            "",
        )
        .unwrap();
        let out = render(
            &t,
            json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]),
            true,
        )
        .unwrap();
        assert!(out.starts_with("4a["), "{out}");
    }
}
