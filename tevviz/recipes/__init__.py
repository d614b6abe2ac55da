"""How tevviz's pairs and drafters are made: not the engine, not a face (cli, commands, api, app).

`demo_pair` trains the embedded stdlib target and drafter; `drafter` trains SmolLM2's autoregressive drafter on
the target's answers to `chat_prompts`; `block` (with `block_data`) trains a block drafter; `fetch` brings a
pretrained target into the cache. `tevviz pair ...` is the door to each. The engine never imports from here.
"""
