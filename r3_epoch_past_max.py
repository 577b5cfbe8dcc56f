# After iter_epoch(2**64-2), iter(loader) runs epoch 2**64-1, which iter_epoch() refuses as out of range
import dlfeed
L=dlfeed.Loader("/tmp/tester-py/fx/h5", fields=["y"], batch_size=4)
for _ in L.iter_epoch(2**64-2): pass
b=next(iter(L)); print("batch.epoch", b.epoch, "loader.epoch", L.epoch)
try: L.iter_epoch(b.epoch)
except ValueError as e: print("iter_epoch of that epoch:", e)
