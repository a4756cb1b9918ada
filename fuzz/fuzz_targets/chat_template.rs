//! Fuzz target: arbitrary bytes through `oxllm_server::fuzzing::chat_template` (see its docs for the
//! invariants checked); any panic is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    oxllm_server::fuzzing::chat_template(data);
});
