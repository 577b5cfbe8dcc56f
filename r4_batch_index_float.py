import dlfeed
b=next(iter(dlfeed.Loader("/tmp/tester-py/fx/h5", fields=["y","x"], batch_size=4)))
for k in [1.0, None, b"y"]:
    try: b[k]
    except Exception as e: print(repr(k), type(e).__name__ + ":", e)
