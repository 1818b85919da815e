"""Low precision in distributed training: loss scaling every rank agrees on, FP8 formats and scaling.

    loss_scaling.py  a dynamic loss scaler for fp16 whose skip decision and clipping norm are agreed
                     across ranks (Micikevicius et al., 2018), for gradients sharded as in FSDP/ZeRO
    fp8.py           the two FP8 formats (e4m3 for weights and activations, e5m2 for gradients:
                     Micikevicius et al., 2022), scaling by amax per tensor or per row, and delayed
                     scaling from an amax history (Transformer Engine) against current scaling
    fp8_bytes.py     FP8 all-gather of sharded weights with one agreed scale, and the bytes it moves

Pure torch; introduced in notebooks/17-compile-and-low-precision.ipynb.
"""
