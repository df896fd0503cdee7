-- Approval policies (DESIGN "Approvals"): a write tool's card carries who may approve it (a
-- grant held on the card's scope), whether the requester may approve their own request, and how
-- many distinct people must approve. NULL approval_grant: today's rule (the run's owner decides,
-- with the tool's own grant). Each approval of a card that needs more than one is a row of
-- interrupt_approval, claimed under the run's lock: unique per approver, so a person counts once.

ALTER TABLE interrupt
    ADD COLUMN approval_grant     text,
    ADD COLUMN self_approval      boolean  NOT NULL DEFAULT true,
    ADD COLUMN approvals_required smallint NOT NULL DEFAULT 1
        CHECK (approvals_required BETWEEN 1 AND 2);

CREATE TABLE interrupt_approval (
    interrupt_id     text NOT NULL REFERENCES interrupt (id) ON DELETE CASCADE,
    approver         text NOT NULL,
    idempotency_key  text NOT NULL,
    approved_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (interrupt_id, approver)
);

-- The inbox: pending cards by the grant that may approve them.
CREATE INDEX interrupt_pending_approval_idx ON interrupt (approval_grant, created_at)
    WHERE status = 'pending';
