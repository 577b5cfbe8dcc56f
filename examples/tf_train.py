# SPDX-License-Identifier: Apache-2.0
"""Train a tiny Keras model on a dlfeed tf.data.Dataset.

    build/tools/dlfeed generate --format tfrecord --dir data/ext --files 8 --samples-per-file 128 \\
        --shape 8,8 --dtype float32
    PYTHONPATH=python:build/python .venv/bin/python examples/tf_train.py data/ext \\
        --fields image,label --feature-dtype float32 --sample-shape 8,8

Each pass model.fit makes over the dataset is the dlfeed loader's next epoch
(a new shuffle with strategy global_shuffle).
"""
import argparse

import tensorflow as tf

import dlfeed.tf


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("--fields", default="records,labels")
    p.add_argument("--feature-dtype", default=None)
    p.add_argument("--sample-shape", default=None)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--classes", type=int, default=10)
    a = p.parse_args()

    x_field, y_field = a.fields.split(",")
    shapes = {y_field: ()}
    if a.sample_shape:
        shapes[x_field] = tuple(int(d) for d in a.sample_shape.split(","))
    ds = dlfeed.tf.dataset(a.data, fields=[x_field, y_field], batch_size=a.batch_size,
                           strategy="global_shuffle", seed=1, feature_dtype=a.feature_dtype, shapes=shapes)
    x_spec, _ = ds.element_spec
    print("element_spec:", ds.element_spec)
    model = tf.keras.Sequential([tf.keras.Input(x_spec.shape[1:], dtype=x_spec.dtype),
                                 tf.keras.layers.Flatten(), tf.keras.layers.Dense(a.classes)])
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-2),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(ds.prefetch(2), epochs=a.epochs, verbose=2)


if __name__ == "__main__":
    main()
