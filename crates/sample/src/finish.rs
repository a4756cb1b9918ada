//! [`check_stop_token`]: whether a just-sampled token ends its request, by stop token id,
//! end-of-sequence token (unless `ignore_eos`) or `max_tokens`. Stop strings are
//! [`crate::StopChecker`]'s job, on the detokenized text.
//!
//! A token that is both a stop token and the `max_tokens`-th one finishes with `Stop`, like vLLM.

use oxllm_core::FinishReason;

use crate::SamplingParams;

/// The finish reason after sampling `token`, with `num_output_tokens` generated so far (`token`
/// included); `None` to keep going. `eos_token_ids` are the model's end-of-sequence ids.
pub fn check_stop_token(
    params: &SamplingParams,
    token: u32,
    eos_token_ids: &[u32],
    num_output_tokens: usize,
) -> Option<FinishReason> {
    if params.stop_token_ids.contains(&token)
        || (!params.ignore_eos && eos_token_ids.contains(&token))
    {
        return Some(FinishReason::Stop);
    }
    if num_output_tokens >= params.max_tokens {
        return Some(FinishReason::Length);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_ids_eos_and_length() {
        let p = SamplingParams {
            max_tokens: 3,
            stop_token_ids: vec![5],
            ..SamplingParams::default()
        };
        assert_eq!(check_stop_token(&p, 1, &[2], 1), None);
        assert_eq!(check_stop_token(&p, 2, &[2], 1), Some(FinishReason::Stop));
        assert_eq!(check_stop_token(&p, 5, &[2], 1), Some(FinishReason::Stop));
        assert_eq!(check_stop_token(&p, 1, &[2], 3), Some(FinishReason::Length));
        assert_eq!(check_stop_token(&p, 2, &[2], 3), Some(FinishReason::Stop));
        let ignore = SamplingParams {
            ignore_eos: true,
            ..p
        };
        assert_eq!(check_stop_token(&ignore, 2, &[2], 1), None);
        assert_eq!(
            check_stop_token(&ignore, 5, &[2], 1),
            Some(FinishReason::Stop)
        );
    }
}
