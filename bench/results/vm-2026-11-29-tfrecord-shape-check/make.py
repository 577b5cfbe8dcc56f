# SPDX-License-Identifier: Apache-2.0
import os, numpy as np
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
d = "/tmp/tfm/data/train"; os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(0)
for i in range(4):
    with tf.io.TFRecordWriter(f"{d}/img_{i}_of_4.tfrecord") as w:
        for _ in range(4096):
            img = rng.integers(0, 255, (32, 32), dtype=np.uint8)
            f = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                 "size": tf.train.Feature(int64_list=tf.train.Int64List(value=[32]))}
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
