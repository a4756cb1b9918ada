//! Model file readers (GGUF, safetensors, Hugging Face directories). See the module docs.
