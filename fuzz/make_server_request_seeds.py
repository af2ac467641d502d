#!/usr/bin/env python3
"""Writes the server_request_fuzz seed corpus (fuzz/corpus/server_request/): one file per case,
the endpoint letter ('c' chat completions, 'p' completions, 'm' messages, 't' tokenize,
'd' detokenize, '*' all) followed by the body. Good requests of every field the server maps and
handmade bad ones. Run from the repository root: python3 fuzz/make_server_request_seeds.py
"""
import base64
import json
import os

USER = [{"role": "user", "content": "Hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]

PNG_9X7 = base64.b64encode(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus",
                                             "image", "png_c2_d8.png"), "rb").read()).decode()

SEEDS = {
    "chat_minimal": ("c", {"model": "tiny", "messages": USER}),
    "chat_every_field": ("c", {
        "model": "tiny", "messages": [{"role": "system", "content": "S"}] + USER,
        "tools": TOOLS, "tool_choice": "auto", "reasoning_effort": "max",
        "response_format": {"type": "json_object"}, "max_completion_tokens": 10,
        "temperature": 0.7, "top_p": 0.9, "top_k": 5, "min_p": 0.1, "seed": 7,
        "stop": ["x", "yz"], "presence_penalty": 0.5, "frequency_penalty": -0.5,
        "logprobs": True, "top_logprobs": 3, "n": 1, "stream": True,
        "stream_options": {"include_usage": True}}),
    "chat_tool_loop": ("c", {"messages": USER + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], "tools": TOOLS}),
    "chat_thinking_switches": ("c", {"messages": USER, "thinking": {"type": "disabled"},
                                     "chat_template_kwargs": {"drop_thinking": False}}),
    "chat_bad_tool_placement": ("c", {"messages": [{"role": "tool", "tool_call_id": "a",
                                                    "content": "r"}]}),
    "chat_bad_types": ("c", {"messages": USER, "temperature": "hot", "n": 2}),
    "chat_max_tokens_beyond": ("c", {"messages": USER, "max_tokens": 99999999}),
    "chat_huge_integer": ("c", {"messages": USER, "seed": 123456789012345678901234567890}),
    "completions_text": ("p", {"prompt": "Once upon", "max_tokens": 5, "echo": True,
                               "logprobs": 2, "stop": "\n"}),
    "completions_ids": ("p", {"prompt": [1, 2, 3], "return_token_ids": True,
                              "skip_special_tokens": False, "stream": True}),
    "completions_bad_id": ("p", {"prompt": [1, -2, 3]}),
    "completions_nested": ("p", {"prompt": [[5, 6]], "add_special_tokens": False}),
    "messages_full": ("m", {
        "model": "tiny", "max_tokens": 20, "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"},
             {"type": "text", "text": "Let me check."},
             {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "P"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                          "content": [{"type": "text", "text": "sunny"}]}]}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 100},
        "stop_sequences": ["END"], "temperature": 0.5, "top_p": 0.9, "top_k": 3,
        "stream": True}),
    "messages_tool_result_unanswered": ("m", {"max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]}),
    "messages_no_max_tokens": ("m", {"messages": USER}),
    "tokenize_prompt": ("t", {"prompt": "hello world", "return_token_strs": True}),
    "tokenize_chat": ("t", {"messages": USER}),
    "detokenize": ("d", {"tokens": [5, 6, 7]}),
    # vision.md §3: a 9 x 7 PNG (fuzz/corpus/image/png_c2_d8.png) as a data: URL and a base64 source.
    "chat_image": ("c", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + PNG_9X7}},
        {"type": "text", "text": "describe"}]}]}),
    "messages_image": ("m", {"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": PNG_9X7}}]}]}),
}

RAW = {
    "all_not_json": b"*{\"messages\": [",
    "all_not_object": b"*[1, 2]",
    "all_invalid_utf8": b"*{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}",
    "all_deep": b"*" + b"[" * 600,
}


def main():
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "server_request")
    os.makedirs(out_dir, exist_ok=True)
    for name, (endpoint, body) in SEEDS.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(endpoint.encode() + json.dumps(body, ensure_ascii=False).encode("utf-8"))
    for name, data in RAW.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
