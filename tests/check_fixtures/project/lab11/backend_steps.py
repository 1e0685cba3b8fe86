"""An epoch whose micro-batches run inside a context that a backend object gives, handed the
model: the backend may set require_backward_grad_sync there, out of the checker's sight."""


def epoch_with_backend(model, backend, batches, optimizer, accum):
    for inputs in batches:
        for k in range(accum):
            with backend.microstep_context(model=model, index=k, count=accum):
                loss = model(inputs[k]).sum() / accum
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
