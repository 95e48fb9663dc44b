"""What the training framework does around the model's math.

Two frameworks run the same plan differently, and the published runs cosearch is checked
against used both.  An :class:`Engine` names the differences the performance model
prices; the time of every other piece (kernels, collectives, the pipeline schedule) is the
same.

* ``pipeline_scatter_gather`` — the pipeline send is split over the tensor-parallel ranks
  (each sends ``1/tp`` of the tensor) and all-gathered inside the node after receipt.  Both
  frameworks do it: Megatron-LM's ``scatter_gather_tensors_in_pipeline`` and DeepSpeed's
  pipeline engine, which partitions activations and their gradients whenever tensor
  parallelism is on (``PipelineEngine``: ``is_pipe_partitioned = is_grad_partitioned =
  is_model_parallel``; the receiver's ``PartitionedTensor.full()`` all-gathers over the
  tensor-parallel group).  ``False`` prices a framework that sends whole tensors.
* ``blocking_p2p`` — how a stage's pipeline transfers meet its compute.  Megatron-LM pairs a
  send with the opposite receive in one batched ``isend``/``irecv`` call
  (``send_forward_recv_backward``): two exchanges per microbatch per model chunk.
  DeepSpeed's ``TrainSchedule`` issues ``RecvActivation``, ``SendGrad``, ``SendActivation``
  and ``RecvGrad`` as separate instructions, each blocking until its partner stage posts
  the matching one (its docstrings: "The communication is blocking and must be paired"):
  an interior stage spends four transfer times per microbatch, the first and last stage
  two.  (Checked against a simulation of the instruction streams, ``tests/reference.py``.)
  DeepSpeed has no interleaved schedule, so a blocking engine refuses virtual stages.
* ``overlap_grad_reduce`` — the data-parallel gradient reduction runs behind the backward
  of the last microbatch (Megatron-LM's bucketed reduction) or only after the pipeline has
  drained (DeepSpeed's pipeline schedule ends with a ``ReduceGrads`` instruction).
* ``grad_accum_bytes`` — HBM bytes moved per parameter per microbatch to accumulate
  gradients outside the backward GEMMs: 0 where the weight-gradient GEMM accumulates into
  the fp32 main gradient itself (Megatron-LM's ``gradient_accumulation_fusion``); DeepSpeed's
  ``BF16_Optimizer`` adds each micro-step's bf16 gradient into an fp32 buffer
  (``hp_grad.add_(lp.grad.to(fp32))``): at least a 2-byte read and a 4-byte read and write,
  10 bytes.
* ``grad_reduce_bytes`` — bytes per gradient element the data-parallel reduction moves
  (None: the memory model's gradient bytes).  Both frameworks reduce bf16 training's
  gradients in fp32: Megatron-LM forces ``accumulate_allreduce_grads_in_fp32`` for bf16,
  and ``BF16_Optimizer.get_grads_for_reduction`` returns the fp32 buffers.
* ``zero3_per_layer`` — how ZeRO-3's gathers meet compute.  False: the stage's parameter
  gathers and gradient reduce-scatter run beside all of a microbatch's work (hidden up to
  it).  True (PyTorch FSDP/FSDP2, MaxText's FSDP): every microbatch gathers each layer's
  weights for the forward and again for the backward and reduce-scatters its gradient, with
  one layer of prefetch, so the exposed time is what per-layer compute cannot hide
  (:func:`cosearch._kernels.formulas.fsdp_exposed_s`).
* ``overlap_param_gather`` — with the distributed optimizer (ZeRO 1/2), the updated
  parameters' all-gather runs behind the next step's first forward (Megatron-Core's
  ``overlap_param_gather``) instead of after the optimizer step.
* ``overlap_tp_comm`` — tensor-parallel all-gathers / reduce-scatters split into chunks and
  overlapped with the layer's GEMMs (Megatron-Core's ``tp_comm_overlap`` with Transformer
  Engine userbuffers; needs sequence parallelism in practice): only the part of a layer's TP
  communication that exceeds its compute is exposed.  On in the ``megatron-core-tp-overlap``
  and ``maxtext`` presets.  ``tp_overlap_kernel``: ``"whole-layer"`` (each layer's collectives
  hide behind all of its compute: an upper bound on what any overlap hides), ``"userbuffers"``
  (Transformer Engine's overlap, as Megatron-Core runs it: each collective beside its own GEMM,
  ring-exchanged over the copy engines in ``tp`` chunks or pipelined in 4 chunks on 16 SMs that
  the GEMM gives up, :func:`cosearch._kernels.formulas.userbuffers_exposed_s`; it needs sequence
  parallelism, as Megatron-Core asserts, and hides nothing without it) or ``"async"``
  (asynchronous collectives with no collective matmul: a collective runs beside compute that does
  not depend on it, and inside a layer only the backward has such compute, the weight-gradient
  GEMMs, which nothing else in the layer reads.  So the forward's collectives, which every next op
  waits for, are exposed whole, and the backward's hide behind the layer's weight-gradient GEMMs:
  ``TP_f + max(0, TP_b - W_b)`` a layer.  XLA's async collectives as MaxText's recipes run them).
* ``async_dgrad_comm`` — without ``overlap_tp_comm``, a column-parallel linear's backward issues
  its data gradient's reduce-scatter (sequence parallel) or all-reduce asynchronously and computes
  its weight gradient beside it: Megatron's ``LinearWithGradAccumulationAndAsyncCommunication``
  (``megatron/core/tensor_parallel/layers.py``, relying on ``CUDA_DEVICE_MAX_CONNECTIONS=1`` to
  queue the collective before the weight-gradient GEMM) and Transformer Engine's ``Linear``,
  ``LayerNormLinear`` and ``LayerNormMLP`` ("Overlap dgrad-RS/AR with wgrad").  That collective
  then exposes only what exceeds its layer's weight-gradient GEMM (while it runs, NCCL's CTAs
  slow the GEMM: :func:`cosearch._kernels.formulas.overlapped_exposed_s`); every other TP
  collective, forward or backward, is waited for; under sequence parallelism the same layers
  gather their input again in the backward beside the data-gradient GEMM
  (:data:`cosearch.plan.REGATHERED`).  On in ``megatron-lm``, ``megatron-core``
  (and ``any``); off in ``megatron-lm-2021`` (the SC21 code predates it) and
  ``megatron-deepspeed`` (BLOOM's fork reduces the data gradient synchronously).
* ``attention_kernel`` — which fused attention kernels the framework runs: ``"best"`` (the
  chip's own: Transformer Engine's cuDNN / FlashAttention-3 on Hopper in Megatron-Core) or
  ``"fa2"`` (FlashAttention-2-generation kernels: PyTorch SDPA's flash backend in torchtitan),
  priced at the chip's :attr:`~cosearch.hardware.KernelEfficiency.attention_fa2` — the same on
  Ampere, where FA2 is the best; on H100/H200 about half the rate (0.2885 against 0.526 per
  clock, cosearch's own H200 sweep: cosearch/data/h200_kernels.csv) — or ``"fa1-triton"`` (the FlashAttention-1-era Triton kernel,
  ``flash_attn_triton.py``, llm-foundry's ``attn_impl: triton``): FA2's rate times
  :data:`cosearch.hardware.FA1_TRITON_SPEED` (0.545; FA2 is 1.3-1.5x faster forward and ~2x
  backward, Dao 2023 section 4.1).
* ``selective_recompute`` — what the plan's ``"selective"`` recompute runs again in each
  layer's backward: ``"attention-core"`` (Megatron's selective recomputation: the attention
  scores, softmax and context; with flash attention the fused kernel's forward) or
  ``"every-other-matmul"`` (torchtitan's per-op selective checkpointing, its default
  ``selective_ac_option = "op"``: in execution order every odd matmul and the SDPA output are
  saved and every even matmul and every cheaper op recomputed — for a Llama block wk, wo and
  w3 of wq, wk, wv, wo, w1, w3, w2 — ``torchtitan/distributed/activation_checkpoint.py``,
  ``_get_custom_policy``; ``"every-other-matmul-fused-qkv"`` the same over torchtitan 0.3's one
  fused wqkv matmul, its Llama 3 and Qwen 3 default), ``"dots-saved"`` (MaxText's ``remat_policy: minimal``,
  ``checkpoint_dots_with_no_batch_dims``: the weight GEMMs' outputs saved, every other op rerun;
  the ``maxtext-minimal-remat`` preset), or ``"modules:layernorm,moe_act"`` (Megatron-Core's
  ``--recompute-modules``, :data:`cosearch.graph.RECOMPUTE_MODULES`: each named module's ops run
  again and its activations are not kept, :data:`cosearch.memory.MODULE_TERMS`), or
  ``"maxtext:out_proj=offload,query_proj=device,..."`` (MaxText's ``remat_policy: custom``: each
  named tensor ``remat``, ``device`` or ``offload``, :func:`cosearch.graph.maxtext_policy`; JAX
  reruns what the backward needs and no saved name holds, the ``device`` tensors stay in HBM, the
  ``offload`` ones go to host memory over the chip's host link behind each layer's compute,
  :func:`cosearch.memory.maxtext_saved_bytes`).
  :func:`cosearch.graph.recompute_share` maps it onto the layer's
  ops; the activations kept follow the policy too (:func:`cosearch.memory.every_other_matmul_bytes`
  for the layers :func:`cosearch.memory.every_other_matmul_exact` names — dense multi-head or GQA
  layers, and MoE ones without tensor parallelism, biases or a capacity factor — with flash
  attention; ``"dots-saved"``'s named tensors by :func:`cosearch.memory.maxtext_saved_bytes`, dense,
  MoE and MLA layers alike; Megatron's selective figure, an upper bound, otherwise).
* ``fp8_cast_kernel`` — how FP8 (and NVFP4) training casts each GEMM input and incoming
  gradient: ``"fused"`` (Transformer Engine's kernels in Megatron-Core, NeMo, Megatron-Bridge and
  llm-foundry, at the chip's memory efficiency: one pass, and before it an amax reduction where
  the plan's :attr:`~cosearch.plan.PlanSpec.scaling_recipe` scales by the tensor's own amax,
  :data:`cosearch.graph.RECIPE_CAST_PASSES`) or ``"inductor"`` (torchao's
  per-tensor ``tensorwise`` casts compiled by ``torch.compile``, as torchtitan's Float8 runs:
  a whole-tensor amax reduction, SM-bound at 535 GB/s on an H200's 132 SMs
  (:data:`cosearch.hardware.INDUCTOR_AMAX_BPS_PER_SM`), then the cast and a transposed copy at
  0.56 of the HBM bandwidth (:data:`cosearch.hardware.INDUCTOR_CAST_STREAM`), both measured).
* ``cross_entropy`` — how the loss runs over the logits: ``"fp32"`` (Megatron's
  ``vocab_parallel_cross_entropy``, in Megatron-LM, Megatron-DeepSpeed (``output.float()``) and
  Megatron-Core; torchtitan's ``F.cross_entropy(pred.float(), ...)`` costs the same on an H100:
  52 bytes a logit, :data:`cosearch.graph.CROSS_ENTROPY_FP32_BYTES`) or ``"fused"`` (one kernel
  reading the bf16 logits and writing their gradient: llm-foundry's ``loss_fn:
  fused_crossentropy``, XLA's fusion in MaxText) or ``"te"`` (Transformer Engine's Triton
  ``parallel_cross_entropy``, Megatron-Core's ``cross_entropy_fusion_impl = "te"``: two reads of
  the logits and their gradient written in place, :data:`cosearch.graph.CROSS_ENTROPY_TE_BYTES`).
  Megatron-Core's own fused cross-entropy (``cross_entropy_loss_fusion`` with the ``native``
  implementation, Megatron-Bridge's default) is ``"fp32"``: the same passes, measured the same.
* ``loss_chunks`` — the output layer and the loss run a chunk of the sequence at a time
  (torchtitan's ``ChunkedLossWrapper``, ``num_chunks``, the 0.3 configs' default of 8,
  ``components/loss.py``): the fp32 logits alive at once are one chunk's, and the chunks keep a
  bf16 copy of the final hidden states and an fp32 buffer of their gradient
  (``GradAccumulator``; :func:`cosearch.memory.head_activation_bytes`); the output layer's
  gradient is synced once, at the last chunk, so the time is unchanged.  1: the whole sequence.
* ``sp_even_split`` — sequence parallelism needs each context-parallel rank's sequence to split
  evenly over the tensor-parallel ranks (Megatron-Core's ``_split_along_first_dim`` and
  ``_reduce_scatter_along_first_dim`` assert the [s, b, h] tensor's first dimension divisible by
  the TP size): on in every Megatron preset; off for FSDP/torchtitan (DTensor shards unevenly)
  and MaxText (XLA pads a sharded dimension).
* ``embedding`` — how the input embedding looks tokens up (:data:`cosearch.graph.EMBEDDINGS`):
  ``"gather"`` (a table lookup, every framework's default) or ``"one-hot"`` (MaxText's
  ``use_iota_embed: true``, ``layers/embeddings.py``: the tokens compared with an iota into a
  one-hot matrix, multiplied by the table — a GEMM of ``tokens x vocab x hidden``, whose
  backward is the table's gradient GEMM only).
* ``elementwise`` — how a layer's norms, activation and rotary embedding run: ``"fused"`` (one
  kernel each at the memory efficiency: Megatron-Core and Transformer Engine, ``torch.compile``)
  or ``"eager"`` (PyTorch eager mode running the model's Python op by op, as torchtitan does
  without ``torch.compile`` and llm-foundry does: :data:`cosearch.graph.EAGER_ELEMENTWISE_BYTES`,
  the Python RMSNorm and PyTorch's own LayerNorm and GELU kernels measured, SwiGLU and RoPE
  itemized).
* ``expert_elementwise`` — how an MoE layer's expert biases and clamped activation run
  (:data:`EXPERT_ELEMENTWISE`; only models with them, GPT-OSS, are affected): ``"fused"`` (inside
  the experts' kernels: Transformer Engine's op fuser, ``use_transformer_engine_op_fuser``, or a
  framework that fuses them) or ``"eager"`` (Megatron-Core's ``TEGroupedMLP`` without the op fuser,
  every release from core 0.15 to 0.19: the gate and linear halves clamped and concatenated by
  eager PyTorch before the fused activation, and the down projection's bias added per local expert
  as ``t + b * p`` after it, :func:`cosearch.graph.expert_eager_bytes`; in fp32 where the flex
  dispatcher's backends make the routing probabilities fp32).  ``"eager"`` in ``megatron-core`` and
  ``megatron-core-tp-overlap``; :func:`megatron_core`'s ``op_fuser`` turns it ``"fused"``;
  ``"torchtitan"`` (``fsdp-eager``: torchtitan 0.3's ``GptOssGroupedExperts`` without
  ``torch.compile``, the up projection's bias added, the halves clamped and the clamped SwiGLU run
  op by op, and the down projection's bias added, :func:`cosearch.graph.expert_eager_bytes`).
* ``scaled_rope`` — how a rotary embedding whose cos and sin carry YaRN's attention factor
  (:attr:`cosearch.models.ModelConfig.rope_attention_factor` other than 1: GPT-OSS's) runs:
  ``"fused"`` (like any other) or ``"eager"`` (Megatron-Core: Transformer Engine's fused RoPE takes
  no such factor, so ``rope_utils.apply_rotary_pos_emb`` falls back to its PyTorch RoPE, "mscale=...
  is not supported by TE's fused RoPE. Using unfused implementation", in every release since core
  0.15), priced as :data:`cosearch.graph.EAGER_ELEMENTWISE_BYTES`' rotary (graph ``elementwise``
  ``"rope-eager"``, :func:`graph_elementwise`).  ``"eager"`` in ``megatron-core`` and
  ``megatron-core-tp-overlap``.  Multi-latent attention is exempt: with RoPE fusion on,
  Megatron-Core applies its RoPE in its fused MLA kernels (``fused_apply_mla_rope_for_q`` /
  ``_for_kv``, ``multi_latent_attention.py``, since core 0.13), which take YaRN's scaled cos and sin.
* ``rope_fusion`` — whether a fused-elementwise engine runs the rotary embedding in its fused
  kernel (True) or as Megatron-Core's PyTorch RoPE, op by op, on every rotary layer (False:
  ``apply_rope_fusion`` off: ``--no-rope-fusion``, Megatron-Bridge's ``model.apply_rope_fusion``
  false, NeMo 1's default), priced as the ``"rope-eager"`` graph (:func:`graph_elementwise`;
  :func:`megatron_core`'s ``rope_fusion``, the engine named ``...-unfused-rope``).
* ``activation_fusion`` — whether a fused-elementwise engine runs the MLP's activation (SwiGLU or
  GeLU, with its bias) in its fused kernel (True) or as Megatron-Core's PyTorch ops (False:
  ``bias_activation_fusion`` off, ``MLP.forward`` and ``TEGroupedMLP`` run ``silu(x[0]) * x[1]``
  after a ``chunk``, or ``F.gelu``, op by op: ``--no-bias-swiglu-fusion`` / ``--no-bias-gelu-fusion``,
  and Megatron-LM turns the GeLU one off for a model without linear biases; Megatron-Core's
  ``TransformerConfig`` default, which Megatron-Bridge keeps unless a model provider or recipe sets
  it), priced per :data:`cosearch.graph.EAGER_ELEMENTWISE_BYTES` for the dense, routed and shared
  experts' activation, with the dense MLP's bias added by a pass of its own where the model has one
  (:func:`cosearch.graph.unfused_bias_add_bytes`) (graph ``"act-eager"``, :func:`graph_elementwise`;
  the engine named ``...-unfused-act``).
* ``attention_sinks`` — where a model's attention sinks (:attr:`cosearch.models.ModelConfig.attention_sinks`,
  GPT-OSS) run (:data:`cosearch.graph.ATTENTION_SINKS`): ``"kernel"`` (inside the fused attention:
  Transformer Engine's ``softmax_type learnable``, nothing priced), or as torchtitan rescales the
  attention kernel's output (``models/gpt_oss/model.py``, ``apply_attention_sink_rescale``: ``out *
  sigmoid(lse - sinks)``), compiled by Inductor into one pass (``"compiled"``, ``fsdp``) or op by op
  (``"eager"``, ``fsdp-eager``), priced per :data:`cosearch.graph.ATTENTION_SINK_BYTES`.
* ``router_dtype`` — the operands of an MoE router's GEMM (:data:`cosearch.graph.ROUTER_DTYPES`):
  ``"bf16"`` (Megatron-Core, whose ``--moe-router-dtype fp32`` keeps bf16 operands, MaxText) or
  ``"fp32"`` (``fsdp`` and ``fsdp-eager``: torchtitan's router runs ``gate(x)`` under
  ``torch.autocast(dtype=torch.float32)``, and PyTorch runs an FP32 GEMM on the CUDA cores unless
  TF32 is allowed, off by default), priced on the chip's vector lanes.
* ``expert_precision`` — the routed experts' grouped GEMMs: in the plan's precision (``"plan"``) or
  in bf16 whatever the plan's (``"bf16"``: torchtitan's Float8 and MX converters swap
  ``nn.Linear`` modules, so the experts' grouped GEMMs stay bf16 unless ``moe_fqns_prototype``
  names them; the experts' inputs then kept in bf16 too), :data:`EXPERT_PRECISIONS`.
* ``attn_proj_original_input`` — under a current-scaling, block-scaled or NVFP4 recipe the
  attention's output projection keeps the attention's bf16 output (which the fused attention
  keeps for its own backward anyway) for its weight gradient, instead of its own low-precision
  copy: Megatron-Core since core 0.15 (``transformer/attention.py``: ``set_save_original_input(
  self.linear_proj)`` where ``fp8_recipe != 'delayed'`` with Transformer Engine 2.6+, or FP4 with
  2.7+, "to avoid the extra memory usage of the quantized tensor"; pull request 3465, 2025-08).
  Memory only (:func:`cosearch.memory.layer_activation_bytes`' ``proj_input_cast``).  True in the
  ``megatron-core`` presets.
* ``full_grad_allreduce`` — with ZeRO 1/2 the gradients are still all-reduced in full, and each
  rank then updates its partition and all-gathers the updated weights (DeepSpeed's
  ``BF16_Optimizer`` under its pipeline engine: ``PipelineEngine._bf16_reduce_grads`` calls
  ``buffered_allreduce_fallback`` on the optimizer's fp32 gradients), where Megatron's
  distributed optimizer reduce-scatters them: twice the gradient traffic.  On in the
  ``megatron-deepspeed`` preset.
* ``fp8_param_gather`` — FP8 training keeps each weight only in its FP8 form, with no bf16
  copy (Megatron-Core's ``fp8_param_gather``: Transformer Engine's ``fp8_model_init`` makes the
  parameters FP8 tensors, their fp32 master copy in the distributed optimizer): the row-wise and
  column-wise FP8 copies (1 + 1 bytes a parameter) are the weights, the distributed optimizer's
  parameter all-gather (or ZeRO-3's gathers) move 1 byte a parameter, and the optimizer step
  writes 1.  NVFP4 and bf16 plans are unaffected (no NVFP4 parameter gather).  Off in every
  preset: Megatron-Bridge's performance recipes turn it on for FP8 current scaling and MXFP8
  (``scripts/performance/utils/precision.py``: ``bf16_with_fp8_current_scaling_mixed`` and
  ``bf16_with_mxfp8_mixed`` set ``fp8_param_gather = True``; ``bf16_with_nvfp4_mixed`` False).
* ``moe_dispatcher`` — how an MoE layer's tokens reach their experts over the expert-parallel
  group (Megatron-Core's ``moe_token_dispatcher_type``): ``"alltoall"`` (NCCL all-to-alls of every
  routed copy, :func:`cosearch._kernels.formulas.alltoall_s`) or ``"flex"`` (DeepEP / HybridEP:
  each token sent once to every rank, and between nodes once to every node, that holds one of
  its experts, at HybridEP's measured NVLink and RDMA rates,
  :func:`cosearch._kernels.formulas.flex_alltoall_s`), or ``"gather-tokens"`` (MaxText's
  ``sparse_matmul`` and torchtitan's MoE plan: all-to-alls priced as NCCL's; the ``maxtext`` and
  FSDP presets).  With the experts split over tp > 1 ranks under sequence parallelism,
  Megatron-Core's two route each rank's own tokens and gather the routed copies over tp
  (``dispatch_postprocess``'s all-gather, or the flex group over the tp x ep ranks), while MaxText
  and torchtitan gather the tokens over the tensor-parallel ranks before routing them
  (``sparse_matmul``: "We all gather the input activations over tensor parallelism";
  torchtitan's ``PrepareModuleInputOutput``: "all-gather for input, reduce-scatter for output"):
  :func:`cosearch.graph.build`.  The all-to-all dispatchers sort the copies a rank receives by
  local expert and back (:func:`cosearch.graph.moe_regroup_bytes`).
* ``moe_flex_backend`` — the flex dispatcher's backend (Megatron-Core's
  ``moe_flex_dispatcher_backend``, :data:`FLEX_BACKENDS`): ``"hybridep"`` (the default here: the
  flex rates are HybridEP's) or ``"deepep"`` (Megatron-Core's own default, which its readers set
  where a run names no backend).  They move tokens over NVLink at their own measured rates
  (:data:`cosearch._kernels.formulas.FLEX_NVLINK_SHARE`, ``FLEX_DEEPEP_NVLINK_SHARE``: the same
  benchmark of both), over RDMA at the same one, hold their own SMs by default
  (:func:`moe_comm_sms`) and allocate their own communication buffers
  (:func:`cosearch.memory.moe_dispatch_buffer_bytes`).
* ``overlap_moe_a2a`` — Megatron-Core's ``overlap_moe_expert_parallel_comm``: the combined
  1F1B schedule runs one microbatch's forward beside another's backward, layer by layer, so each
  one's dispatch and combine hide behind the other's compute
  (:func:`cosearch._kernels.formulas.ep_overlap_pair_s`); the first forwards of the schedule's
  warm-up and the last backwards run alone.  ``moe_comm_sms``: SMs the communication kernels
  hold meanwhile (0: the dispatcher's default, :func:`moe_comm_sms`), slowing the compute beside
  them by that share of the chip's SMs.
* ``overlap_p2p_comm`` — Megatron-Core's ``overlap_p2p_comm``: under the interleaved schedule
  (virtual stages > 1) each chunk's send and receive are posted asynchronously after its
  forward (backward) and waited on only before the next forward (backward) needs the tensor, so
  the exchange runs beside the chunk of the opposite direction that comes in between
  (``forward_backward_pipelining_with_interleaving``: ``pp_post_forward`` posts
  ``send_forward_recv_forward(..., overlap_p2p_comm=True)``, ``pp_pre_forward`` waits on the
  receive).  Only the part of a transfer longer than that chunk's compute is exposed; the
  fill and drain still carry every transfer.  Without virtual stages it is off, as Megatron-LM
  turns it off (``validate_args``: "Overlap P2P communication is disabled if not using the
  interleaved schedule").  Megatron-LM has made it the default with interleaving since
  2023-10 (``--no-overlap-p2p-communication``, commit 4eeff55); Megatron-Bridge sets it whenever
  pp > 1 and virtual stages > 1 (``CommOverlapConfig``); NeMo 1's launcher configs set it per
  model (``overlap_p2p_comm``).
* ``pipeline_schedule`` — ``"1f1b"`` (Megatron's one-forward-one-backward, interleaved with
  virtual stages; DeepSpeed's ``TrainSchedule`` under ``blocking_p2p``) or ``"circular"``
  (MaxText's SPMD pipeline, ``layers/pipeline.py``): a pass of ``M`` microbatches
  (:attr:`cosearch.plan.PlanSpec.pipeline_microbatches`, MaxText's ``num_pipeline_microbatches``)
  runs ``M R + pp - 1`` iterations (``R`` repeats, the plan's ``virtual_stages``), each stage
  computing one chunk of ``1 / R`` of its layers in every iteration, the ``pp - 1`` bubble
  iterations included; autodiff through the iterations' scan keeps every iteration's saved
  tensors until the backward (``M + (pp - 1) / R`` stage-equivalents a stage,
  :func:`cosearch._kernels.formulas.inflight_circular`, where 1F1B keeps at most ``pp``);
  each iteration gathers a chunk's weights over FSDP (two chunks held); the embedding and the
  head run outside the loop, their batch sharded over the stage axis too (a ``1 / pp`` share on
  every stage).  ``pipeline_forwarding_delay`` 2 (``pipeline_delay_activation_forwarding``): each
  stage's output waits one more iteration, ``M R + 2 (pp - 1)`` iterations, the bubble and its kept
  iterations twice.  Checked against the residuals JAX saves for MaxText's own pipeline
  (``cosearch/data/maxtext_pipeline_residuals.csv``).
* ``recompute_layers`` — the layers one activation checkpoint spans (1: every layer its own): a
  stage's layers are checkpointed in groups of this many, each group keeping only its input (and,
  under a selective policy, its layers' saved tensors) and, when it reruns, the whole group's
  activations at once — Megatron-Core's ``--recompute-method uniform --recompute-num-layers``,
  MaxText's layer scan over a block of Gemma's attention pattern (2 layers for Gemma 2, 6 for
  Gemma 3: ``cosearch/data/maxtext_layer_residuals.csv`` rows 17-18).  A stage of ``n`` layers
  keeps ``ceil(n / recompute_layers)`` inputs.
* ``context_parallel`` / ``interleaving`` — whether the framework has context parallelism
  and an interleaved pipeline schedule; plans using a missing feature are refused.

Presets and the software they describe:

* ``megatron-lm`` (default): Megatron-LM 2023 (core 0.2-0.4 era) as used by the SC21/Korthikanti
  reproductions: overlapped bucketed DP reduction, parameter all-gather after the step.
* ``megatron-lm-2021``: Megatron-LM of 2021-22 (SC21 paper code): the DP all-reduce runs after
  the backward pass, not overlapped (``--DDP-impl local`` all-reduces after the pipeline drains).
* ``megatron-core``: Megatron-Core as NeMo 2 / Megatron-Bridge (2024+) run it: distributed
  optimizer with ``overlap_grad_reduce`` and ``overlap_param_gather`` (NeMo performance recipes
  set both), context parallelism.
* ``megatron-deepspeed``: BLOOM's framework (above).
* ``fsdp``: PyTorch FSDP / FSDP2 as torchtitan runs it: per-layer gathers every microbatch
  (FSDP cannot skip them under gradient accumulation with FULL_SHARD), fp32 gradient reduction
  (torchtitan's ``mixed_precision_reduce = "float32"``), whole-tensor pipeline sends
  (torch.distributed.pipelining), SDPA's FlashAttention-2 kernels, torchao's Float8 casts
  compiled by Inductor.
* ``fsdp-eager``: the same without ``torch.compile`` (``elementwise = "eager"``).
* ``llm-foundry``: the same FSDP rules as llm-foundry (Composer, 2023-24) runs them (fp32
  reduction in its ``DEFAULT`` mixed precision), with its default ``attn_impl: triton``
  attention (``"fa1-triton"``), Transformer Engine's FP8 casts, and eager elementwise ops: its
  benchmark runs set ``low_precision_layernorm`` (``F.layer_norm`` on bf16) and no
  ``torch.compile`` (``scripts/train/benchmarking/submit_benchmarks.py``, image PyTorch 1.13.1).
* ``maxtext``: MaxText on JAX/XLA: FSDP over ``ici_fsdp_parallelism`` with XLA's asynchronous
  all-gathers prefetching one layer ahead (the same per-layer rule), gradients reduced in
  the parameter dtype; no pipeline scatter/gather; tensor-parallel collectives overlapped with
  independent compute (``overlap_tp_comm`` with ``tp_overlap_kernel="async"``): MaxText's v5e
  and v5p recipe scripts (``MaxText/configs/v5e/128b.sh``, ``v5p/128b.sh``) run XLA with
  ``--xla_tpu_enable_async_collective_fusion=true`` (with its all-gather and multiple-steps
  variants), ``--xla_tpu_overlap_compute_collective_tc=true`` and ``--xla_enable_async_all_gather``:
  the bundle MaxText's ``benchmarks/xla_flags_library.py`` names ``CF_FOR_ALL_GATHER``, CF for
  Continuation Fusion ("Enabled by default but lets make sure"), apart from its CM, Collective
  Matmul.  None of them decomposes an einsum around its all-gather or reduce-scatter (XLA's
  windowed einsum, ``--xla_tpu_decompose_all_gather_einsum`` /
  ``--xla_tpu_decompose_einsum_reduce_scatter``, which MaxText's scripts leave commented out), so
  a collective overlaps only compute that does not wait for it.  Its pipeline stages run
  MaxText's SPMD circular schedule (``pipeline_schedule="circular"``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .graph import MOE_DISPATCHERS

__all__ = ["Engine", "MEGATRON_LM", "MEGATRON_LM_2021", "MEGATRON_CORE", "MEGATRON_CORE_TP_OVERLAP",
           "MEGATRON_DEEPSPEED", "FSDP", "FSDP_EAGER", "LLM_FOUNDRY", "MAXTEXT", "MAXTEXT_MINIMAL_REMAT", "ANY",
           "ENGINES", "preset", "megatron_core", "check_interleaving", "check_features", "MOE_DISPATCHERS",
           "moe_comm_sms", "with_moe_dispatch", "FLEX_BACKENDS", "FLEX_SMS_DEEPEP", "EXPERT_ELEMENTWISE", "expert_graph_option",
           "with_op_fuser", "SCALED_ROPE", "graph_elementwise", "MEGATRON_CROSS_ENTROPY", "with_cross_entropy_fusion",
           "PIPELINE_SCHEDULES"]


@dataclass(frozen=True)
class Engine:
    """How a training framework runs a plan (see the module docstring)."""

    name: str = "megatron-lm"
    pipeline_scatter_gather: bool = True
    blocking_p2p: bool = False
    overlap_grad_reduce: bool = True
    grad_accum_bytes: float = 0.0
    grad_reduce_bytes: float | None = None
    zero3_per_layer: bool = False
    overlap_param_gather: bool = False
    context_parallel: bool = True
    overlap_tp_comm: bool = False
    software: str = ""
    attention_kernel: str = "best"
    selective_recompute: str = "attention-core"
    fp8_cast_kernel: str = "fused"
    cross_entropy: str = "fp32"
    loss_chunks: int = 1
    elementwise: str = "fused"
    embedding: str = "gather"
    sp_even_split: bool = True
    fp8_param_gather: bool = False
    full_grad_allreduce: bool = False
    moe_dispatcher: str = "alltoall"
    overlap_moe_a2a: bool = False
    moe_comm_sms: int = 0
    moe_flex_backend: str = "hybridep"
    tp_overlap_kernel: str = "whole-layer"
    overlap_p2p_comm: bool = False
    async_dgrad_comm: bool = False
    expert_elementwise: str = "fused"
    scaled_rope: str = "fused"
    rope_fusion: bool = True
    activation_fusion: bool = True
    attention_sinks: str = "kernel"
    router_dtype: str = "bf16"
    expert_precision: str = "plan"
    attn_proj_original_input: bool = False
    pipeline_schedule: str = "1f1b"
    pipeline_forwarding_delay: int = 1
    recompute_layers: int = 1
    #: the ZeRO stages the framework runs (what a plan search tries by default)
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)

    def __post_init__(self) -> None:
        from ._validate import choice
        from .graph import (
            ATTENTION_SINKS,
            CROSS_ENTROPY,
            ELEMENTWISE,
            EMBEDDINGS,
            ROUTER_DTYPES,
            check_selective_policy,
        )
        from .hardware import ATTENTION_KERNELS, CAST_KERNELS
        try:
            check_selective_policy(self.selective_recompute)
        except ValueError as exc:
            raise ValueError(f"Engine.selective_recompute: {exc}") from None
        for f, options in (("attention_kernel", ATTENTION_KERNELS),
                           ("fp8_cast_kernel", CAST_KERNELS), ("cross_entropy", CROSS_ENTROPY),
                           ("elementwise", ELEMENTWISE), ("embedding", EMBEDDINGS),
                           ("moe_dispatcher", MOE_DISPATCHERS), ("moe_flex_backend", FLEX_BACKENDS),
                           ("tp_overlap_kernel", TP_OVERLAP_KERNELS),
                           ("expert_elementwise", EXPERT_ELEMENTWISE), ("scaled_rope", SCALED_ROPE),
                           ("attention_sinks", ATTENTION_SINKS),
                           ("router_dtype", ROUTER_DTYPES), ("expert_precision", EXPERT_PRECISIONS),
                           ("pipeline_schedule", PIPELINE_SCHEDULES)):
            choice(f"Engine.{f}", getattr(self, f), options)
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Engine.name must be a non-empty string, got {self.name!r}")
        for f in ("pipeline_scatter_gather", "blocking_p2p", "overlap_grad_reduce", "zero3_per_layer",
                  "overlap_param_gather", "context_parallel", "overlap_tp_comm", "fp8_param_gather",
                  "full_grad_allreduce", "overlap_moe_a2a", "overlap_p2p_comm", "sp_even_split",
                  "async_dgrad_comm", "attn_proj_original_input", "rope_fusion", "activation_fusion"):
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"Engine.{f} must be True or False, got {getattr(self, f)!r}")
        d = self.pipeline_forwarding_delay
        if isinstance(d, bool) or not isinstance(d, int) or d not in (1, 2):
            raise ValueError(f"Engine.pipeline_forwarding_delay must be 1 or 2 (MaxText's "
                             f"pipeline_delay_activation_forwarding), got {self.pipeline_forwarding_delay!r}")
        if self.pipeline_forwarding_delay == 2 and self.pipeline_schedule != "circular":
            raise ValueError("Engine.pipeline_forwarding_delay=2 is MaxText's circular schedule's delayed forwarding: "
                             "it needs pipeline_schedule='circular'")
        r = self.recompute_layers
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= 1 << 16:
            raise ValueError(f"Engine.recompute_layers must be a number of layers >= 1 (the layers one activation "
                             f"checkpoint spans; 1: every layer its own), got {r!r}")
        c = self.loss_chunks
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= 1 << 16:
            raise ValueError(f"Engine.loss_chunks must be a number of sequence chunks >= 1 (1: the whole sequence), "
                             f"got {c!r}")
        n = self.moe_comm_sms
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 1024:
            raise ValueError(f"Engine.moe_comm_sms must be an SM count in [0, 1024] (0: the dispatcher's "
                             f"default), got {n!r}")
        zs = tuple(self.zero_stages) if isinstance(self.zero_stages, (tuple, list)) else ()
        if not zs or any(isinstance(z, bool) or z not in (0, 1, 2, 3) for z in zs):
            raise ValueError(f"Engine.zero_stages must list ZeRO stages 0-3, got {self.zero_stages!r}")
        object.__setattr__(self, "zero_stages", tuple(sorted(set(int(z) for z in zs))))
        for f in ("grad_accum_bytes", "grad_reduce_bytes"):
            x = getattr(self, f)
            if x is None and f == "grad_reduce_bytes":
                continue
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not (0.0 <= x < 1e3):
                raise ValueError(f"Engine.{f} must be a number of bytes in [0, 1000), got {x!r}")

    @property
    def tp_overlap_rule(self) -> str | None:
        """How a layer's tensor-parallel collectives overlap its compute: ``tp_overlap_kernel`` where
        ``overlap_tp_comm``, else ``"dgrad-wgrad"`` where ``async_dgrad_comm``, else None (every
        collective second on the compute stream)."""
        if self.overlap_tp_comm:
            return self.tp_overlap_kernel
        return "dgrad-wgrad" if self.async_dgrad_comm else None


#: How a framework runs its pipeline stages (``Engine.pipeline_schedule``): Megatron's 1F1B
#: (interleaved with virtual stages; DeepSpeed's blocking variant) or MaxText's SPMD circular
#: schedule.
PIPELINE_SCHEDULES = ("1f1b", "circular")

#: How ``overlap_tp_comm`` hides tensor-parallel collectives (``Engine.tp_overlap_kernel``).
TP_OVERLAP_KERNELS = ("whole-layer", "userbuffers", "async")

#: How the routed experts' bias and clamped activation run (``Engine.expert_elementwise``):
#: inside the experts' kernels, as Megatron-Core's eager passes, or as torchtitan's GPT-OSS experts
#: run them without ``torch.compile`` (graph options :data:`cosearch.graph.EXPERT_ELEMENTWISE`,
#: :func:`expert_graph_option`).
EXPERT_ELEMENTWISE = ("fused", "eager", "torchtitan")


def expert_graph_option(engine: Engine) -> str:
    """The layer graph's ``expert_elementwise`` (:data:`cosearch.graph.EXPERT_ELEMENTWISE`) for
    ``engine``: its own, the eager passes in fp32 under the flex dispatcher (DeepEP and HybridEP
    take fp32 routing probabilities: Megatron-Core's ``token_dispatcher.py`` casts them, "HybridEP
    only supports float32 probs"), so ``t + b * p`` promotes to fp32."""
    if engine.expert_elementwise == "eager" and engine.moe_dispatcher == "flex":
        return "eager-fp32-probs"
    return engine.expert_elementwise


#: How a RoPE scaled by YaRN's attention factor runs (``Engine.scaled_rope``).
SCALED_ROPE = ("fused", "eager")


def graph_elementwise(engine: Engine, model) -> str:
    """The layer graph's ``elementwise`` (:data:`cosearch.graph.ELEMENTWISE`) for ``engine`` on
    ``model``: the engine's own, or ``"rope-eager"`` where the engine fuses its elementwise ops but
    runs the model's RoPE eagerly: RoPE fusion off (:attr:`Engine.rope_fusion`), or a YaRN-scaled
    RoPE (:attr:`Engine.scaled_rope`) outside multi-latent attention, whose fused MLA kernels
    take the scaled cos and sin; ``"act-eager"`` where it runs the MLP's activation unfused
    (:attr:`Engine.activation_fusion`); ``"act-rope-eager"`` both."""
    from .models import ModelConfig
    engine = preset(engine)
    if not isinstance(model, ModelConfig):
        raise ValueError(f"graph_elementwise expects a ModelConfig, got {type(model).__name__}")
    if engine.elementwise != "fused":
        return engine.elementwise
    rope = model.position == "rotary" and (not engine.rope_fusion or (
        engine.scaled_rope == "eager" and model.rope_attention_factor != 1.0 and model.mla is None))
    act = not engine.activation_fusion and model.activation in ("swiglu", "gelu")
    if act and model.activation_clamp:
        raise ValueError(f"engine {engine.name!r} runs the MLP's activation unfused, and {model.name}'s is clamped: "
                         "a clamped activation unfused is not modelled (its clamps run inside Megatron-Core's eager "
                         "GLU, which the experts' eager passes do not itemize)")
    return {(False, False): "fused", (True, False): "rope-eager", (False, True): "act-eager",
            (True, True): "act-rope-eager"}[(rope, act)]



#: SMs a dispatcher's kernels hold while they run, by default: DeepEP/HybridEP's ``flex``
#: backends 24 inside one NVLink domain and 8 across nodes (HybridEP's defaults,
#: deepseek-ai/DeepEP branch ``hybrid-ep``, ``csrc/hybrid_ep/config.cuh``:
#: ``num_sms_dispatch_api.value_or((num_of_nodes == 1) ? 24 : 8)``); NCCL's all-to-all up to
#: its channel limit, 32 CTAs (``MAXCHANNELS`` in NCCL's ``src/include/device.h``).
FLEX_SMS_NVLINK, FLEX_SMS_RDMA, NCCL_MAX_CTAS = 24, 8, 32
#: The precisions an engine runs the routed experts' GEMMs in (``Engine.expert_precision``).
EXPERT_PRECISIONS = ("plan", "bf16")
#: The flex dispatcher's backends (Megatron-Core's ``moe_flex_dispatcher_backend``).
FLEX_BACKENDS = ("hybridep", "deepep")
#: SMs DeepEP's normal kernels hold by default: its ``Buffer.num_sms = 20`` (deepseek-ai/DeepEP
#: ``deep_ep/buffer.py``), which Megatron-Core also passed as ``moe_deepep_num_sms``.
FLEX_SMS_DEEPEP = 20
#: CTAs (one per SM) an NCCL all-gather or reduce-scatter holds while a data-parallel or FSDP
#: collective runs beside compute: 24 on an 8-GPU H100 node, as Nsight Systems shows FSDP's
#: prefetch ``ncclAllGather`` launching 24 blocks beside a GEMM, which then gets 108 of the 132
#: SMs (NVIDIA developer forum, "Compute-communication overlap causes severe GEMM performance
#: degradation because of tail effect", 2025, thread 337991).  Within NCCL's channel limit
#: (:data:`NCCL_MAX_CTAS`).  :func:`cosearch.plan.collective_sm_share` divides it by the chip's SMs.
NCCL_COLLECTIVE_CTAS = 24


def moe_comm_sms(engine: Engine, multi_node: bool) -> int:
    """SMs the engine's MoE dispatch and combine kernels hold while they run: its own
    ``moe_comm_sms``, else its dispatcher's default (:data:`FLEX_SMS_NVLINK`,
    :data:`FLEX_SMS_RDMA` for HybridEP, :data:`FLEX_SMS_DEEPEP`, :data:`NCCL_MAX_CTAS`)."""
    if engine.moe_comm_sms:
        return engine.moe_comm_sms
    if engine.moe_dispatcher == "flex":
        if engine.moe_flex_backend == "deepep":
            return FLEX_SMS_DEEPEP
        return FLEX_SMS_RDMA if multi_node else FLEX_SMS_NVLINK
    return NCCL_MAX_CTAS


#: Megatron-LM: pipeline sends scattered over the tp ranks, gradient reduction overlapped
#: with the last backward, weight-gradient accumulation fused into the GEMMs.  The default.
#: Megatron-LM's only sharding is its distributed optimizer (``--use-distributed-optimizer``:
#: optimizer state and gradient reduce-scatter, read as ZeRO-1); its arguments have no ZeRO-2/3,
#: so the Megatron-LM engines run ZeRO 0 and 1.
MEGATRON_ZERO = (0, 1)

MEGATRON_LM = Engine(software="Megatron-LM 2023 (bucketed, overlapped DP reduction)", zero_stages=MEGATRON_ZERO,
                     async_dgrad_comm=True)

#: Megatron-LM of 2021-22: the data-parallel all-reduce after the backward, not overlapped.
MEGATRON_LM_2021 = Engine("megatron-lm-2021", overlap_grad_reduce=False, zero_stages=MEGATRON_ZERO,
                          software="Megatron-LM 2021-22 (SC21 code: DP all-reduce after the backward)")

#: Megatron-Core (NeMo 2 / Megatron-Bridge, 2024+): distributed optimizer with overlapped
#: gradient reduce-scatter and parameter all-gather.
#: Megatron-Core adds Megatron-FSDP (parameters, gradients and optimizer state sharded, ZeRO-3-like:
#: ``megatron/core/distributed/fsdp``, the "FSDP" column of Megatron-Bridge's performance tables).
MEGATRON_CORE_ZERO = (0, 1, 3)

MEGATRON_CORE = Engine("megatron-core", overlap_param_gather=True, zero_stages=MEGATRON_CORE_ZERO,
                       async_dgrad_comm=True, expert_elementwise="eager", scaled_rope="eager",
                       attn_proj_original_input=True,
                       software="Megatron-Core in NeMo 2 / Megatron-Bridge (2024+)")

#: Megatron-DeepSpeed with DeepSpeed's pipeline engine and BF16_Optimizer (BLOOM's
#: framework): partitioned pipeline sends issued one at a time and blocking, gradients
#: all-reduced in fp32 after the pipeline drains (in full, even under ZeRO-1), a separate fp32
#: accumulation pass per microbatch.
MEGATRON_DEEPSPEED = Engine("megatron-deepspeed", blocking_p2p=True, overlap_grad_reduce=False,
                            grad_accum_bytes=10.0, grad_reduce_bytes=4.0, context_parallel=False,
                            # DeepSpeed's PipelineEngine asserts "ZeRO-2 and ZeRO-3 are incompatible with
                            # pipeline parallelism" (deepspeed/runtime/pipe/engine.py)
                            full_grad_allreduce=True, zero_stages=(0, 1),
                            software="Megatron-DeepSpeed with DeepSpeed's pipeline engine (BLOOM, 2022)")

#: PyTorch FSDP / FSDP2 (torchtitan; its MoE router's GEMM in FP32).
FSDP = Engine("fsdp", pipeline_scatter_gather=False, grad_reduce_bytes=4.0, zero3_per_layer=True,
              sp_even_split=False, attention_kernel="fa2", selective_recompute="every-other-matmul", fp8_cast_kernel="inductor",
              moe_dispatcher="gather-tokens", router_dtype="fp32", attention_sinks="compiled",
              software="PyTorch FSDP/FSDP2 (torchtitan 2024-25) with SDPA's FlashAttention-2 attention, "
                       "per-op selective checkpointing and torchao's compiled Float8 casts")

#: torchtitan without ``torch.compile``: the model's norms, SwiGLU (the experts' too) and RoPE run
#: op by op, and GPT-OSS's expert biases and clamped activation as its ``GptOssGroupedExperts`` does.
FSDP_EAGER = replace(FSDP, name="fsdp-eager", elementwise="eager", expert_elementwise="torchtitan", attention_sinks="eager",
                     software=FSDP.software + ", without torch.compile (eager elementwise ops)")

#: llm-foundry (Composer + PyTorch FSDP) with its Triton FlashAttention (attn_impl: triton).
LLM_FOUNDRY = replace(FSDP, name="llm-foundry", attention_kernel="fa1-triton", selective_recompute="attention-core",
                      fp8_cast_kernel="fused", cross_entropy="fused", elementwise="eager", router_dtype="bf16",
                      attention_sinks="kernel",
                      software="llm-foundry/Composer 2023-24 on PyTorch FSDP with the FlashAttention-1-era Triton "
                               "kernel (attn_impl: triton, flash_attn_triton.py)")



def llm_foundry(mixed_precision: str = "DEFAULT", attn_impl: str = "triton", loss: str = "fused") -> Engine:
    """llm-foundry with its FSDP ``mixed_precision`` (``DEFAULT``: gradients reduced in fp32;
    ``PURE``: bf16 parameters, gradients and reduction, llmfoundry/utils/config_utils.py's
    ``get_mixed_precision``) and attention kernel (``attn_impl``: ``triton``, the
    FlashAttention-1-era Triton kernel; ``flash``, the FlashAttention-2 package, priced as the
    FSDP engine's).  ``loss``: ``"fused"`` (MPT's default ``loss_fn: fused_crossentropy``,
    flash-attn's one-kernel cross-entropy) or ``"fp32"`` (:attr:`Engine.cross_entropy`: MPT's
    ``torch_crossentropy``, ``nn.CrossEntropyLoss`` whose log-softmax autocast runs in fp32, and a
    Hugging Face model's own loss, which upcasts the logits)."""
    if mixed_precision not in ("DEFAULT", "PURE"):
        raise ValueError(f"llm_foundry: mixed_precision {mixed_precision!r} is not modelled (DEFAULT, PURE)")
    if attn_impl not in ("triton", "flash", "torch"):
        raise ValueError(f"llm_foundry: attn_impl {attn_impl!r} is not modelled (triton, flash, torch)")
    if loss not in ("fused", "fp32"):
        raise ValueError(f"llm_foundry: loss {loss!r} is not modelled (fused, fp32)")
    e = LLM_FOUNDRY
    if loss == "fp32":
        e = replace(e, name=e.name + "-fp32-loss", cross_entropy="fp32", software=e.software + ", fp32 cross-entropy")
    if attn_impl == "flash":
        e = replace(e, name=e.name + "-fa2", attention_kernel=FSDP.attention_kernel,
                    software=e.software.replace("FlashAttention-1-era Triton kernel (attn_impl: triton, "
                                                "flash_attn_triton.py)", "FlashAttention-2 (attn_impl: flash)"))
    if mixed_precision == "PURE":
        e = replace(e, name=e.name + "-pure", grad_reduce_bytes=2.0,
                    software=e.software + ", FSDP mixed precision PURE (bf16 reduction)")
    return e


#: MaxText (JAX/XLA).
MAXTEXT = Engine("maxtext", pipeline_scatter_gather=False, zero3_per_layer=True, sp_even_split=False,
                 cross_entropy="fused", overlap_tp_comm=True, tp_overlap_kernel="async", moe_dispatcher="gather-tokens",
                 pipeline_schedule="circular", software="MaxText on JAX/XLA (2023-24)")

#: MaxText with ``remat_policy: minimal`` (its decoder's
#: ``jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims``): a plan's ``"selective"``
#: recompute saves the weight GEMMs' outputs and runs everything else again.
MAXTEXT_MINIMAL_REMAT = replace(MAXTEXT, name="maxtext-minimal-remat", selective_recompute="dots-saved",
                                software=MAXTEXT.software + ", remat_policy minimal")

#: Megatron-Core with TP-communication overlap (``--tp-comm-overlap``).
MEGATRON_CORE_TP_OVERLAP = Engine("megatron-core-tp-overlap", overlap_param_gather=True, overlap_tp_comm=True,
                                  async_dgrad_comm=True,
                                  tp_overlap_kernel="userbuffers", expert_elementwise="eager", scaled_rope="eager",
                                  zero_stages=MEGATRON_CORE_ZERO,
                                  software="Megatron-Core with --tp-comm-overlap (Transformer Engine userbuffers)")

#: Megatron-LM's physics with every ZeRO stage open: a plan search not bound to what one
#: framework's arguments can express (``--engine any``).
ANY = replace(MEGATRON_LM, name="any", zero_stages=(0, 1, 2, 3),
              software="Megatron-LM's overlap rules with ZeRO 0-3 (no single framework)")

ENGINES = {e.name: e for e in (MEGATRON_LM, MEGATRON_LM_2021, MEGATRON_CORE, MEGATRON_CORE_TP_OVERLAP,
                               MEGATRON_DEEPSPEED, FSDP, FSDP_EAGER, LLM_FOUNDRY, MAXTEXT, MAXTEXT_MINIMAL_REMAT,
                               ANY)}


def megatron_core(tp_comm_overlap: bool = False, fp8_param_gather: bool = False,
                  overlap_grad_reduce: bool = True, overlap_p2p_comm: bool = False, op_fuser: bool = False,
                  rope_fusion: bool = True, activation_fusion: bool = True) -> Engine:
    """Megatron-Core with its performance switches: ``tp_comm_overlap``
    (:data:`MEGATRON_CORE_TP_OVERLAP`), ``fp8_param_gather`` (FP8-only weights, the engine named
    ``...-fp8-params``), ``overlap_grad_reduce`` (Megatron's ``--overlap-grad-reduce``, which
    NeMo's recipes set; off: the gradient reduction runs after the backward, the engine named
    ``...-no-grad-overlap``), ``overlap_p2p_comm`` (pipeline sends and receives beside the
    interleaved schedule's chunks, the engine named ``...-p2p-overlap``) and ``op_fuser``
    (``--use-transformer-engine-op-fuser``: the experts' bias and clamped activation inside
    Transformer Engine's fused grouped MLP, :attr:`Engine.expert_elementwise` ``"fused"``, the
    engine named ``...-op-fuser``) and ``rope_fusion`` (Megatron's ``apply_rope_fusion``; off:
    every RoPE op by op, :attr:`Engine.rope_fusion`, the engine named ``...-unfused-rope``) and
    ``activation_fusion`` (Megatron's ``bias_activation_fusion``; off: the MLP's activation op by
    op, :attr:`Engine.activation_fusion`, the engine named ``...-unfused-act``)."""
    from ._validate import flag
    tp_comm_overlap, fp8_param_gather = flag("tp_comm_overlap", tp_comm_overlap), flag("fp8_param_gather",
                                                                                      fp8_param_gather)
    overlap_grad_reduce, overlap_p2p_comm = flag("overlap_grad_reduce", overlap_grad_reduce), flag(
        "overlap_p2p_comm", overlap_p2p_comm)
    op_fuser, rope_fusion = flag("op_fuser", op_fuser), flag("rope_fusion", rope_fusion)
    activation_fusion = flag("activation_fusion", activation_fusion)
    base = MEGATRON_CORE_TP_OVERLAP if tp_comm_overlap else MEGATRON_CORE
    if not rope_fusion:
        base = replace(base, name=base.name + "-unfused-rope", rope_fusion=False)
    if not activation_fusion:
        base = replace(base, name=base.name + "-unfused-act", activation_fusion=False)
    if overlap_p2p_comm:
        base = replace(base, name=base.name + "-p2p-overlap", overlap_p2p_comm=True)
    if fp8_param_gather:
        base = replace(base, name=base.name + "-fp8-params", fp8_param_gather=True)
    if not overlap_grad_reduce:
        base = replace(base, name=base.name + "-no-grad-overlap", overlap_grad_reduce=False)
    return with_op_fuser(base) if op_fuser else base


def with_op_fuser(engine: Engine) -> Engine:
    """``engine`` running the experts through Transformer Engine's op fuser
    (``use_transformer_engine_op_fuser``): their bias and clamped activation inside its fused
    grouped MLP (:attr:`Engine.expert_elementwise` ``"fused"``), named ``...-op-fuser``; as it is
    where they are fused already (``engine``: an :class:`Engine` or a preset's name)."""
    engine = preset(engine)
    if engine.expert_elementwise == "fused":
        return engine
    if engine.expert_elementwise == "torchtitan":
        raise ValueError(f"the op fuser is Megatron-Core's with Transformer Engine; engine {engine.name} runs "
                         "torchtitan's experts (compile the model, engine fsdp, to fuse their passes)")
    return replace(engine, name=engine.name + "-op-fuser", expert_elementwise="fused")


#: Megatron-Core's loss implementations (``cross_entropy_loss_fusion`` off, or on with
#: ``cross_entropy_fusion_impl`` ``native`` / ``te``) as :attr:`Engine.cross_entropy`: its unfused
#: ``vocab_parallel_cross_entropy`` and its jit-fused ``native`` one make the same fp32 passes
#: (and measure the same, :data:`cosearch.graph.CROSS_ENTROPY_FP32_BYTES`); ``te`` is Transformer
#: Engine's Triton kernel.
MEGATRON_CROSS_ENTROPY = {"off": "fp32", "native": "fp32", "te": "te"}


def with_cross_entropy_fusion(engine: Engine, impl: str) -> Engine:
    """``engine`` computing the loss as Megatron-Core's ``impl`` (:data:`MEGATRON_CROSS_ENTROPY`:
    ``"off"``, ``"native"`` or ``"te"``), named ``...-te-loss`` for Transformer Engine's; as it is
    where it already computes it so."""
    if impl not in MEGATRON_CROSS_ENTROPY:
        raise ValueError(f"cross-entropy implementation {impl!r}: Megatron-Core's are "
                         f"{', '.join(MEGATRON_CROSS_ENTROPY)} (cross_entropy_loss_fusion off, native, te)")
    engine = preset(engine)
    want = MEGATRON_CROSS_ENTROPY[impl]
    if engine.cross_entropy == want:
        return engine
    return replace(engine, name=engine.name + ("-te-loss" if want == "te" else "-fp32-loss"), cross_entropy=want)


def uneven_sequence_split(engine: Engine, tokens: int, tp: int, sequence_parallel: bool) -> bool:
    """Whether ``engine`` cannot run sequence parallelism that splits ``tokens`` (a sequence, or a
    context-parallel rank's share of it) over ``tp`` ranks (:attr:`Engine.sp_even_split`)."""
    return bool(sequence_parallel) and tp > 1 and engine.sp_even_split and tokens % tp != 0


def with_recompute_modules(engine: Engine, modules) -> Engine:
    """``engine`` whose selective recompute reruns Megatron-Core's ``recompute_modules``
    (:data:`cosearch.graph.RECOMPUTE_MODULES`); as it is for none."""
    modules = tuple(modules)
    return replace(engine, selective_recompute="modules:" + ",".join(modules)) if modules else engine


def with_moe_dispatch(engine: Engine, dispatcher: str = "alltoall", overlap: bool = False, sms: int = 0,
                      backend: str | None = None) -> Engine:
    """``engine`` with Megatron-Core's MoE dispatch switches: ``moe_token_dispatcher_type``
    (``"alltoall"`` or ``"flex"``; DeepEP's and HybridEP's backends are both ``"flex"``; MaxText's
    MaxText's and torchtitan's ``"gather-tokens"``, :data:`MOE_DISPATCHERS`),
    ``overlap_moe_expert_parallel_comm``, the dispatcher's SM count (0: its default) and the flex
    dispatcher's ``backend`` (:data:`FLEX_BACKENDS`; None: the engine's); named after them where
    they differ from the engine's."""
    backend = engine.moe_flex_backend if backend is None else backend
    if (dispatcher, overlap, sms, backend) == (engine.moe_dispatcher, engine.overlap_moe_a2a, engine.moe_comm_sms,
                                              engine.moe_flex_backend):
        return engine
    name = engine.name + (f"-{dispatcher}" if dispatcher != engine.moe_dispatcher else "") + \
        (f"-{backend}" if backend != engine.moe_flex_backend and dispatcher == "flex" else "") + \
        ("-a2a-overlap" if overlap and not engine.overlap_moe_a2a else "") + (f"-{sms}sms" if sms else "")
    return replace(engine, name=name, moe_dispatcher=dispatcher, overlap_moe_a2a=overlap, moe_comm_sms=sms,
                   moe_flex_backend=backend)


def preset(engine: Engine | str | None) -> Engine:
    """An :class:`Engine`, or one by name (None: Megatron-LM)."""
    if engine is None:
        return MEGATRON_LM
    if isinstance(engine, Engine):
        return engine
    if isinstance(engine, str) and engine in ENGINES:
        return ENGINES[engine]
    raise ValueError(f"unknown engine {engine!r}; choose one of {sorted(ENGINES)} or pass an Engine")


def check_features(engine: Engine, virtual_stages: int = 1, context_parallel: int = 1, pipeline: int = 1,
                   expert_parallel: int = 1, recompute=()) -> None:
    """Refuse a plan that uses a feature the engine does not have, or that the engine's
    EP all-to-all overlap cannot run with (Megatron-Core's ``TransformerConfig.__post_init__``
    asserts expert parallelism, virtual stages under pipeline parallelism, and no full
    recompute)."""
    check_interleaving(engine, virtual_stages)
    if engine.overlap_moe_a2a:
        if expert_parallel <= 1:
            raise ValueError(f"engine {engine.name!r} overlaps the MoE all-to-alls (overlap_moe_expert_parallel_comm), "
                             "which needs expert_parallel > 1")
        if pipeline > 1 and virtual_stages <= 1:
            raise ValueError(f"engine {engine.name!r}: the MoE all-to-all overlap needs virtual_stages > 1 when "
                             f"pp={pipeline} > 1 (Megatron-Core requires virtual_pipeline_model_parallel_size)")
        if "full" in tuple(recompute):
            raise ValueError(f"engine {engine.name!r}: the MoE all-to-all overlap cannot run with full recompute "
                             "(Megatron-Core asserts recompute_granularity != 'full')")
    if context_parallel > 1 and not engine.context_parallel:
        raise ValueError(f"engine {engine.name!r} has no context parallelism: context_parallel must be 1, "
                         f"got {context_parallel}")


def check_interleaving(engine: Engine, virtual_stages: int) -> None:
    """Refuse virtual stages on an engine without an interleaved schedule (a blocking one)."""
    if engine.blocking_p2p and virtual_stages > 1:
        raise ValueError(f"engine {engine.name!r} has no interleaved pipeline schedule: virtual_stages must be "
                         f"1, got {virtual_stages}")
