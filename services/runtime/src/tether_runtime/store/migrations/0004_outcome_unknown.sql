-- A write call whose outcome nobody can tell after a crash waits in `unknown` for a person's
-- answer, through an interrupt of kind `outcome_unknown` (retry / mark done / abandon).
ALTER TABLE tool_call DROP CONSTRAINT IF EXISTS tool_call_status_check;
ALTER TABLE tool_call ADD CONSTRAINT tool_call_status_check CHECK (status IN
    ('proposed', 'approved', 'executing', 'unknown', 'succeeded', 'failed', 'rejected'));
ALTER TABLE interrupt DROP CONSTRAINT IF EXISTS interrupt_kind_check;
ALTER TABLE interrupt ADD CONSTRAINT interrupt_kind_check CHECK (kind IN
    ('confirm_action', 'select_option', 'provide_input', 'outcome_unknown'));
