#!/bin/bash
# Megatron-LM launch of a stratos plan: llama3-8b on 2 nodes x 8 GPUs (dgx-h100)
#   TP 2 x PP 4 (VPP 2) x DP 2, micro-batch 1, global batch 16 (8 microbatches per DP rank)
# Run on every node with NODE_RANK, MASTER_ADDR and MASTER_PORT set.

export CUDA_DEVICE_MAX_CONNECTIONS=1

DISTRIBUTED_ARGS=(
    --nproc_per_node 8
    --nnodes 2
    --node_rank ${NODE_RANK:-0}
    --master_addr ${MASTER_ADDR:-localhost}
    --master_port ${MASTER_PORT:-6000}
)

MODEL_ARGS=(
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --seq-length 4096
    --max-position-embeddings 4096
    --position-embedding-type rope
    --normalization RMSNorm
    --swiglu
    --disable-bias-linear
    --untie-embeddings-and-output-weights
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 16
    --bf16
    --recompute-granularity selective
    --train-iters 1000       # training hyperparameters: yours, not the plan's
    --lr 3.0e-4
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --sequence-parallel
    --pipeline-model-parallel-size 4
    --pipeline-model-parallel-layout "Et*3|t*4|t*4|t*4|t*4|t*4|t*4|t*5L"
    --use-distributed-optimizer
)

DATA_ARGS=(
    --mock-data               # replace with your --data-path and tokenizer
    --tokenizer-type NullTokenizer
    --vocab-size 128256
)

torchrun "${DISTRIBUTED_ARGS[@]}" pretrain_gpt.py \
    "${MODEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "${MODEL_PARALLEL_ARGS[@]}" \
    "${DATA_ARGS[@]}"
