"""One epoch of training with a loss scaler that steps the optimizer when told: every
`accumulation` micro-batches."""


def train_one_epoch(model, loader, optimizer, loss_scaler, accumulation):
    model.train()
    for step, (inputs, targets) in enumerate(loader):
        loss = (model(inputs) - targets).square().mean() / accumulation
        apply_update = (step + 1) % accumulation == 0
        loss_scaler(loss, optimizer, parameters=model.parameters(), update_grad=apply_update)
        if apply_update:
            optimizer.zero_grad()
