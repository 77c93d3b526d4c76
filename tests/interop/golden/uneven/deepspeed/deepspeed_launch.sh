#!/bin/bash
# DeepSpeed launch of a stratos plan: llama3-8b on 2 nodes x 8 GPUs (dgx-h100)
#   TP 2 x PP 4 x DP 2, micro-batch 1 per GPU, 8 gradient accumulation steps, ZeRO-1
# Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed) pretrain_gpt.py carries the model, TP and PP;
# ds_config.json the batch, ZeRO and precision. Edit hostfile to name your nodes.

MODEL_ARGS=(
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --num-key-value-heads 8
    --seq-length 4096
    --max-position-embeddings 4096
    --use-rotary-position-embeddings
    --normalization rmsnorm
    --swiglu
    --disable-bias-linear
    --untie-embeddings-and-output-weights
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 16
    --bf16
    --train-iters 1000       # training hyperparameters: yours, not the plan's
    --lr 3.0e-4
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --sequence-parallel
    --pipeline-model-parallel-size 4
    --deepspeed
    --deepspeed_config ds_config.json
    --zero-stage 1
)

DATA_ARGS=(
    --data-path ${DATA_PATH:-my-gpt_text_document}   # your data and tokenizer
    --tokenizer-type NullTokenizer
    --vocab-size 128256
)

deepspeed --hostfile=hostfile --num_nodes=2 --num_gpus=8 pretrain_gpt.py \
    "${MODEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "${MODEL_PARALLEL_ARGS[@]}" \
    "${DATA_ARGS[@]}"
