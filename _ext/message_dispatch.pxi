# Included at the end of message.pyx: the dispatch path's kernels (ReputMessageService).
