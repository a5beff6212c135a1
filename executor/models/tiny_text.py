"""Tokenizers and text encoders for the demo models, made in code: nothing is downloaded.

Byte-level tokenizers with no merges read any text, Chinese included (three tokens per
character), where the published vocabularies would have to be fetched. The encoders are the
real architectures (CLIP, T5, Qwen2.5-VL, Qwen3, Mistral 3) at toy width.
"""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path
from typing import Any

QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                 "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
                 "<think>", "</think>")
# Qwen3's chat template, reduced to what ZImagePipeline uses (a user turn, the generation
# prompt, the enable_thinking flag).
QWEN3_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}{%- endif -%}")
# Mistral Small 3's chat template, reduced: a system prompt and user turns whose content is
# a list of {"type": "text" | "image"} parts (what Flux2Pipeline passes).
MISTRAL_CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['content'] is string -%}"
    "{%- set parts = [{'type': 'text', 'text': message['content']}] -%}"
    "{%- else -%}{%- set parts = message['content'] -%}{%- endif -%}"
    "{%- if message['role'] == 'system' -%}{{- '[SYSTEM_PROMPT]' -}}"
    "{%- elif message['role'] == 'user' -%}{{- '[INST]' -}}{%- endif -%}"
    "{%- for part in parts -%}{%- if part['type'] == 'text' -%}{{- part['text'] -}}"
    "{%- else -%}{{- '[IMG]' -}}{%- endif -%}{%- endfor -%}"
    "{%- if message['role'] == 'system' -%}{{- '[/SYSTEM_PROMPT]' -}}"
    "{%- elif message['role'] == 'user' -%}{{- '[/INST]' -}}"
    "{%- else -%}{{- eos_token -}}{%- endif -%}"
    "{%- endfor -%}")


def _byte_chars() -> list[str]:
    from executor.models.families import bytes_to_unicode
    return list(bytes_to_unicode().values())


def clip_tokenizer() -> tuple[Any, int, int]:
    """A byte-level CLIP tokenizer (any text, Chinese included), and its start and end ids."""
    from transformers import CLIPTokenizer
    chars = _byte_chars()
    vocab = {c: i for i, c in enumerate(chars + [c + "</w>" for c in chars]
                                        + ["<|startoftext|>", "<|endoftext|>"])}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "vocab.json").write_text(json.dumps(vocab))
        (folder / "merges.txt").write_text("#version: 0.2\n")
        tok = CLIPTokenizer(vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"),
                            model_max_length=77)
    bos, eos = tok.convert_tokens_to_ids(["<|startoftext|>", "<|endoftext|>"])
    return tok, bos, eos


def clip_encoder(vocab_size: int, bos: int, eos: int, projection: bool) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection
    config = CLIPTextConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=eos,
                            vocab_size=vocab_size, hidden_size=32, intermediate_size=37,
                            num_attention_heads=4, num_hidden_layers=3, projection_dim=32)
    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(config)


def t5_tokenizer() -> Any:
    """A T5 tokenizer (sentencepiece-style unigram) over printable ASCII, each character a
    piece, alone or after a word boundary: what FLUX's and SD 3's T5 reads, with no
    download. Other characters read as <unk>, as many do in the published T5 vocabulary."""
    from transformers import T5TokenizerFast
    chars = string.printable.strip()
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0),
              *((c, -3.0) for c in chars), *(("\u2581" + c, -2.5) for c in chars)]
    return T5TokenizerFast(vocab=pieces, extra_ids=0, model_max_length=512)


def t5_encoder(vocab_size: int, d_model: int = 32) -> Any:
    from transformers import T5Config, T5EncoderModel
    return T5EncoderModel(T5Config(
        vocab_size=vocab_size, d_model=d_model, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1,
        decoder_start_token_id=0))


def qwen_tokenizer(chat_template: str | None = None) -> Any:
    """A Qwen2Tokenizer (byte-level BPE, no merges) with Qwen's special tokens: the chat
    markers and the vision tokens Qwen2.5-VL knows (266 tokens in all)."""
    from transformers import AddedToken, Qwen2Tokenizer
    vocab = {c: i for i, c in enumerate(_byte_chars())}
    vocab.update({s: len(vocab) + i for i, s in enumerate(QWEN_SPECIALS)})
    tok = Qwen2Tokenizer(vocab=vocab, merges=[], model_max_length=32768)
    tok.add_tokens([AddedToken(s, special=True, normalized=False) for s in QWEN_SPECIALS],
                   special_tokens=True)
    if chat_template:
        tok.chat_template = chat_template
    return tok


def qwen25vl_encoder(tok: Any) -> Any:
    """Qwen2.5-VL (what Qwen-Image reads prompts with): 2 text layers of width 16 (M-RoPE
    sections 1/1/2 over head_dim 8), a 2-layer vision tower projecting to 16."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    ids = tok.convert_tokens_to_ids
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tok), "hidden_size": 16, "intermediate_size": 16,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
            "max_position_embeddings": 8192,
            "rope_scaling": {"mrope_section": [1, 1, 2], "rope_type": "default",
                             "type": "default"},
            "rope_theta": 1000000.0, "bos_token_id": ids("<|endoftext|>"),
            "eos_token_id": ids("<|im_end|>"), "pad_token_id": ids("<|endoftext|>")},
        vision_config={"depth": 2, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2,
                       "out_hidden_size": 16, "fullatt_block_indexes": [1],
                       "window_size": 112},
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"))
    return Qwen2_5_VLForConditionalGeneration(config)


def qwen3_encoder(tok: Any) -> Any:
    """Qwen3 (what Z-Image reads prompts with; its second-to-last hidden state, so two
    layers at least)."""
    from transformers import Qwen3Config, Qwen3Model
    ids = tok.convert_tokens_to_ids
    return Qwen3Model(Qwen3Config(
        vocab_size=len(tok), hidden_size=16, intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=8, max_position_embeddings=4096,
        bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>")))


def mistral_tokenizer() -> Any:
    """A fast byte-level tokenizer with Mistral's special tokens and a reduced chat template
    (FLUX.2's text side; its published PixtralProcessor needs torchvision)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AddedToken, PreTrainedTokenizerFast
    specials = ["<unk>", "<s>", "</s>", "<pad>", "[IMG]", "[IMG_BREAK]", "[IMG_END]",
                "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"]
    vocab = {c: i for i, c in enumerate(_byte_chars())}
    vocab.update({s: len(vocab) + i for i, s in enumerate(specials)})
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>", pad_token="<pad>", model_max_length=131072)
    tok.add_tokens([AddedToken(s, special=True, normalized=False) for s in specials],
                   special_tokens=True)
    tok.chat_template = MISTRAL_CHAT_TEMPLATE
    return tok


def mistral3_encoder(tok: Any) -> Any:
    """Mistral 3 (FLUX.2's text encoder): 30 layers of width 16, since FLUX.2 stacks hidden
    states 10, 20 and 30 (a text width of 48 for its transformer)."""
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration
    ids = tok.convert_tokens_to_ids
    special = {"bos_token_id": ids("<s>"), "eos_token_id": ids("</s>"),
               "pad_token_id": ids("<pad>")}
    return Mistral3ForConditionalGeneration(Mistral3Config(
        text_config={"model_type": "mistral", "vocab_size": len(tok), "hidden_size": 16,
                     "intermediate_size": 37, "max_position_embeddings": 4096,
                     "num_attention_heads": 4, "num_hidden_layers": 30,
                     "num_key_value_heads": 2, "head_dim": 4, "rms_norm_eps": 1e-5,
                     "rope_theta": 1e9, "sliding_window": None, **special},
        vision_config={"model_type": "pixtral", "hidden_size": 16, "num_hidden_layers": 1,
                       "num_attention_heads": 4, "intermediate_size": 37, "image_size": 64,
                       "patch_size": 8, "num_channels": 3, "head_dim": 4},
        image_token_index=ids("[IMG]"), spatial_merge_size=2, vision_feature_layer=-1,
        **special))
