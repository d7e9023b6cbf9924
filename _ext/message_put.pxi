# Included at the end of message.pyx: the single-put path's kernels (putMessage of one message).
